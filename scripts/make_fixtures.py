#!/usr/bin/env python3
"""Make Hugging Face parity fixtures for qvl.

Builds small random-weight Qwen3VLForConditionalGeneration models in the real architecture,
stores their weights in bf16 (model.safetensors, Hugging Face names), runs them in float32 with
transformers (eager attention, on the GPU when there is one) and writes, per model directory:

  config.json, generation_config.json, model.safetensors
  fixture.json      the cases: prompt ids, greedy continuation, logits file, top-1/top-2 margin
  <case>.logits     little-endian float32 [n_prompt, vocab]: the prompt's logits (the layout of
                    `qvl run --dump-logits`)

and the image cases (made after the text cases, with their own seeds, so the text files do not
change):

  preprocessor_config.json   the image processor's settings (small min/max pixels)
  <image>.png                synthetic pictures (deterministic)
  fixture_images.json        the image cases: pictures, grids, prompt ids with the image pads,
                             greedy continuation, file names below
  <case>.pixels              float32 [sum t*h*w, 1536]: Qwen2VLImageProcessorFast's pixel_values
  <case>.vision              float32 [1 + n_deepstack, n_tokens, out_hidden]: the vision
                             encoder's merger output, then each deepstack merger's output
  <case>.logits              float32 [n_prompt, vocab]: the prompt's logits with the pictures

The JPEG case (photo.jpg, img_jpeg.*) is made last. With --add-jpeg-case, the committed model
directories under OUT_DIR are loaded instead and only the JPEG case is (re)made: photo.jpg,
img_jpeg.* and its entry in fixture_images.json, after checking that this environment
reproduces the committed image cases.

Needs torch, torchvision, transformers >= 4.57, PIL and numpy. $QVL_FIXTURE_DEVICE (cpu or
cuda) overrides the device (default: cuda when there is one).
Usage:  python3 scripts/make_fixtures.py [--add-jpeg-case] OUT_DIR
"""
import inspect
import json
import os
import sys

import numpy as np
import torch
import transformers
from PIL import Image
from safetensors.torch import save_file
from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

# Two text configs that differ in GQA ratio, tied vs untied head, head_dim and mrope_section.
MODELS = {
    "tiny-tied": dict(
        text=dict(vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                  rope_theta=5000000.0, rms_norm_eps=1e-6,
                  mrope_section=[6, 5, 5], tie_word_embeddings=True),
        vision=dict(depth=3, hidden_size=32, intermediate_size=64, num_heads=2,
                    out_hidden_size=64, num_position_embeddings=64,
                    deepstack_visual_indexes=[0, 1]),
        seed=1234, std=0.25),
    "tiny-untied": dict(
        text=dict(vocab_size=384, hidden_size=96, intermediate_size=128, num_hidden_layers=3,
                  num_attention_heads=6, num_key_value_heads=1, head_dim=16,
                  rope_theta=10000.0, rms_norm_eps=1e-6,
                  mrope_section=[4, 2, 2], tie_word_embeddings=False),
        vision=dict(depth=2, hidden_size=32, intermediate_size=48, num_heads=4,
                    out_hidden_size=96, num_position_embeddings=36,
                    deepstack_visual_indexes=[1]),
        seed=99, std=0.25),
}

# Special ids of the real tokenizer are out of range for a tiny vocab; the cases use plain ids.
N_GREEDY = 10


def make_config(spec):
    t = spec["text"]
    text_config = dict(
        vocab_size=t["vocab_size"], hidden_size=t["hidden_size"],
        intermediate_size=t["intermediate_size"], num_hidden_layers=t["num_hidden_layers"],
        num_attention_heads=t["num_attention_heads"],
        num_key_value_heads=t["num_key_value_heads"], head_dim=t["head_dim"],
        hidden_act="silu", max_position_embeddings=4096, rms_norm_eps=t["rms_norm_eps"],
        attention_bias=False, tie_word_embeddings=t["tie_word_embeddings"],
        bos_token_id=0, eos_token_id=1)
    rope = dict(rope_type="default", mrope_section=t["mrope_section"], mrope_interleaved=True)
    text_params = inspect.signature(transformers.Qwen3VLTextConfig.__init__).parameters
    if "rope_parameters" in text_params:  # transformers >= 5 spelling
        text_config["rope_parameters"] = dict(rope, rope_theta=t["rope_theta"])
    else:
        text_config["rope_scaling"] = rope
        text_config["rope_theta"] = t["rope_theta"]
    v = spec["vision"]
    vision_config = dict(
        depth=v["depth"], hidden_size=v["hidden_size"], intermediate_size=v["intermediate_size"],
        num_heads=v["num_heads"], hidden_act="gelu_pytorch_tanh", patch_size=16,
        temporal_patch_size=2, spatial_merge_size=2, in_channels=3,
        out_hidden_size=v["out_hidden_size"],
        num_position_embeddings=v["num_position_embeddings"],
        deepstack_visual_indexes=v["deepstack_visual_indexes"])
    vocab = t["vocab_size"]
    cfg = Qwen3VLConfig(text_config=text_config, vision_config=vision_config,
                        image_token_id=vocab - 4, video_token_id=vocab - 3,
                        vision_start_token_id=vocab - 6, vision_end_token_id=vocab - 5,
                        tie_word_embeddings=t["tie_word_embeddings"])
    return cfg


def randomize(model, std, gen):
    """Weights with a scale that keeps logits well separated (the HF init is too flat)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            parts = name.split(".")
            if parts[-1] == "weight" and "norm" in parts[-2]:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith(".bias"):
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))
            else:
                fan_in = p.shape[-1] if p.dim() > 1 else 1
                scale = std if "embed_tokens" in name or "lm_head" in name else std / max(1.0, (fan_in / 64) ** 0.5)
                p.copy_(scale * torch.randn(p.shape, generator=gen))


def state_dict_for_file(model, tied):
    sd = {k: v.detach().to(torch.bfloat16).contiguous().cpu() for k, v in model.state_dict().items()}
    if tied:
        sd.pop("lm_head.weight", None)
    return sd


def greedy(model, ids, n, device):
    """Greedy continuation recomputing the whole sequence each step (no cache: the oracle)."""
    seq = list(ids)
    margins = []
    for _ in range(n):
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([seq], device=device)).logits[0, -1].float()
        top = torch.topk(logits, 2)
        margins.append(float(top.values[0] - top.values[1]))
        seq.append(int(top.indices[0]))
    return seq[len(ids):], min(margins)


# ---- image cases --------------------------------------------------------------------------------

# Small bounds so the tiny models see few tokens: min 4096 = 4 merged tokens of 32x32 pixels,
# max 16384 = 16 tokens.
PREPROCESSOR = {
    "size": {"shortest_edge": 4096, "longest_edge": 16384},
    "patch_size": 16, "temporal_patch_size": 2, "merge_size": 2,
    "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
    "do_rescale": True, "rescale_factor": 1.0 / 255, "do_normalize": True,
    "do_resize": True, "do_convert_rgb": True, "resample": 3,
    "image_processor_type": "Qwen2VLImageProcessorFast",
}

# name -> (height, width, seed). wide: non-square, resampled upwards in one direction only;
# small: below min_pixels (upscaled); tall: the other orientation; large: above max_pixels
# (downscaled, so the antialiasing filter is wide).
IMAGES = {"wide": (64, 96, 11), "small": (40, 40, 12), "tall": (96, 64, 13), "large": (150, 200, 14)}

IMAGE_CASES = [("img_wide", ["wide"]), ("img_small", ["small"]), ("img_large", ["large"]),
               ("img_two", ["tall", "small"])]


def make_picture(h, w, seed):
    """Smooth colour ramps plus texture and a few hard edges: every resampling tap matters."""
    rng = np.random.RandomState(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    r = 255 * x / max(1, w - 1)
    g = 255 * (0.5 + 0.5 * np.sin(y / 5.0 + x / 9.0))
    b = 255 * ((x // 8 + y // 8) % 2)
    img = np.stack([r, g, b], axis=-1) + rng.uniform(-40, 40, size=(h, w, 3))
    return Image.fromarray(np.clip(np.rint(img), 0, 255).astype(np.uint8), "RGB")


def vision_outputs(model, pixel_values, grid):
    """The merger output [n_tokens, D] and the deepstack outputs (list of [n_tokens, D])."""
    out = model.model.visual(pixel_values, grid_thw=grid)
    if isinstance(out, tuple):
        return out[0], list(out[1])
    emb = getattr(out, "pooler_output", None)
    if emb is None:
        emb = out.last_hidden_state
    return emb, list(out.deepstack_features)


def mm_forward(model, ids, pixel_values, grid, device):
    """Logits [n, vocab] of ids with the pictures (newer transformers want mm_token_type_ids:
    1 at image pads, else 0, as the processor returns it)."""
    input_ids = torch.tensor([ids], device=device)
    kwargs = dict(input_ids=input_ids, pixel_values=pixel_values, image_grid_thw=grid)
    if "mm_token_type_ids" in inspect.signature(model.forward).parameters:
        kwargs["mm_token_type_ids"] = (input_ids == model.config.image_token_id).long()
    return model(**kwargs).logits[0].float()


def greedy_images(model, ids, pixel_values, grid, n, device):
    """Greedy continuation with the pictures, recomputing everything each step."""
    seq = list(ids)
    margins = []
    for _ in range(n):
        with torch.no_grad():
            logits = mm_forward(model, seq, pixel_values, grid, device)[-1]
        top = torch.topk(logits, 2)
        margins.append(float(top.values[0] - top.values[1]))
        seq.append(int(top.indices[0]))
    return seq[len(ids):], min(margins)


def image_case(name, model, proc, out, case_name, pictures, g, device):
    """One image case: pictures is a list of (file name, RGB PIL picture, (h, w)); g draws the
    prompt's text ids. Writes <case>.pixels/.vision/.logits and returns the case's entry."""
    cfg = model.config
    vocab = cfg.text_config.vocab_size
    feats = proc(images=[p for _, p, _ in pictures], return_tensors="pt")
    pixel_values = feats["pixel_values"].float()
    grid = feats["image_grid_thw"]
    pixel_values.numpy().astype("<f4").tofile(os.path.join(out, case_name + ".pixels"))
    pv, gd = pixel_values.to(device), grid.to(device)
    with torch.no_grad():
        emb, deepstack = vision_outputs(model, pv, gd)
    n_tokens = int(sum(int(t * hh * ww) for t, hh, ww in grid.tolist()) // 4)
    assert emb.shape[0] == n_tokens, (emb.shape, n_tokens)
    vis = torch.stack([emb.float()] + [d.float() for d in deepstack]).cpu()
    vis.numpy().astype("<f4").tofile(os.path.join(out, case_name + ".vision"))
    # Prompt: text, then per picture <vision_start> pads <vision_end> and more text.
    ids = torch.randint(8, vocab - 8, (3,), generator=g).tolist()
    for t, hh, ww in grid.tolist():
        ids += [cfg.vision_start_token_id] + [cfg.image_token_id] * (t * hh * ww // 4)
        ids += [cfg.vision_end_token_id]
        ids += torch.randint(8, vocab - 8, (2,), generator=g).tolist()
    with torch.no_grad():
        logits = mm_forward(model, ids, pv, gd, device).cpu()
    logits.numpy().astype("<f4").tofile(os.path.join(out, case_name + ".logits"))
    cont, margin = greedy_images(model, ids, pv, gd, N_GREEDY, device)
    print(f"{name} {case_name}: grids={grid.tolist()} n_prompt={len(ids)} greedy={cont} "
          f"min margin={margin:.4f}")
    return dict(name=case_name, images=[f for f, _, _ in pictures],
                image_sizes=[list(hw) for _, _, hw in pictures],
                image_grid_thw=grid.tolist(), n_image_tokens=n_tokens,
                n_deepstack=len(deepstack), pixels_file=case_name + ".pixels",
                vision_file=case_name + ".vision", logits_file=case_name + ".logits",
                prompt_ids=ids, n_prompt=len(ids), greedy_ids=cont, vocab=vocab,
                min_greedy_margin=margin, max_abs_logit=float(logits.abs().max()))


def image_cases(name, spec, model, out, device):
    from transformers import Qwen2VLImageProcessorFast
    with open(os.path.join(out, "preprocessor_config.json"), "w") as f:
        json.dump(PREPROCESSOR, f, indent=2)
    proc = Qwen2VLImageProcessorFast.from_pretrained(out)
    pictures = {}
    for img_name, (h, w, seed) in IMAGES.items():
        make_picture(h, w, seed).save(os.path.join(out, img_name + ".png"))
        # Read back the way a user's file is read (transformers' load_image: RGB).
        pictures[img_name] = Image.open(os.path.join(out, img_name + ".png")).convert("RGB")
    g = torch.Generator().manual_seed(spec["seed"] + 3)
    cases = [image_case(name, model, proc, out, case_name,
                        [(n + ".png", pictures[n], IMAGES[n][:2]) for n in names], g, device)
             for case_name, names in IMAGE_CASES]
    with open(os.path.join(out, "fixture_images.json"), "w") as f:
        json.dump(dict(model=name, torch_version=torch.__version__,
                       transformers_version=transformers.__version__, device=device,
                       compute_dtype="float32", weight_dtype="bfloat16",
                       image_processor="Qwen2VLImageProcessorFast (on the CPU)",
                       cases=cases), f, indent=1)


# ---- the JPEG case --------------------------------------------------------------------------------

# Added to the committed model directories by --add-jpeg-case, which changes no other file: the
# picture goes through Pillow's JPEG decoder (libjpeg-turbo) before the processor, exactly as a
# user's .jpg does in transformers, so stage 1 checks qvl's decoder + preprocessing against it.
# 111x157 (h x w): odd sizes give 4:2:0 chroma an unpaired last row and column; the processor
# resizes it to 96x160 (grid 6x10, 15 tokens): smaller in one direction, larger in the other.
JPEG_CASE = "img_jpeg"
JPEG_PICTURE = ("photo.jpg", 111, 157, 21)  # file, height, width, seed
JPEG_SAVE = dict(quality=90, subsampling="4:2:0")


def make_photo(h, w, seed):
    """Photo-like: sky gradient, a soft-edged sun, a shaded hill line, buildings with hard edges
    and lit windows, mild sensor noise."""
    rng = np.random.RandomState(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    t = y / (h - 1)
    img = np.stack([70 + 90 * t, 120 + 80 * t, 230 - 40 * t], axis=-1)
    sun = np.clip(1.5 - np.hypot(x - 0.78 * w, y - 0.22 * h) / (0.07 * w), 0, 1)[..., None]
    img = img * (1 - sun) + np.array([255.0, 236, 180]) * sun
    shade = 0.65 + 0.35 * np.cos((x - 0.3 * w) / (0.4 * w))
    grass = np.stack([40 + 50 * shade * t, 90 + 70 * shade, 30 + 30 * shade], axis=-1)
    img = np.where((y > 0.6 * h + 0.07 * h * np.sin(x / (0.12 * w)))[..., None], grass, img)
    for x0, bw, top, colour in [(0.06, 0.13, 0.30, (150, 140, 128)), (0.22, 0.09, 0.45, (120, 84, 70)),
                                (0.40, 0.16, 0.18, (205, 205, 215))]:
        c0, c1, r0 = int(x0 * w), int((x0 + bw) * w), int(top * h)
        r1 = int(0.78 * h)
        img[r0:r1, c0:c1] = np.array(colour) * (0.8 + 0.2 * (x[r0:r1, c0:c1] - c0) / (c1 - c0))[..., None]
        win = ((y[r0:r1, c0:c1] - r0) % 7 < 3) & ((x[r0:r1, c0:c1] - c0) % 6 >= 2) & \
              ((x[r0:r1, c0:c1] - c0) % 6 < 4) & (y[r0:r1, c0:c1] > r0 + 2)
        img[r0:r1, c0:c1][win] = (250, 220, 120)
    img += rng.normal(0, 4, size=img.shape)
    return Image.fromarray(np.clip(np.rint(img), 0, 255).astype(np.uint8), "RGB")


def check_committed(name, model, proc, out, cases, device):
    """Recompute the committed image cases in this environment: pixel_values must be identical
    (else the processor or Pillow differs and the new case would not belong with them); the
    vision and logits differences are printed relative to each file's largest value."""
    for c in cases:
        pics = [Image.open(os.path.join(out, f)).convert("RGB") for f in c["images"]]
        feats = proc(images=pics, return_tensors="pt")
        px = feats["pixel_values"].float()
        old = np.fromfile(os.path.join(out, c["pixels_file"]), dtype="<f4").reshape(px.shape)
        if not np.array_equal(px.numpy(), old):
            sys.exit(f"{name} {c['name']}: pixel_values differ from the committed file")
        pv, gd = px.to(device), feats["image_grid_thw"].to(device)
        with torch.no_grad():
            emb, deepstack = vision_outputs(model, pv, gd)
            logits = mm_forward(model, c["prompt_ids"], pv, gd, device).cpu().numpy()
        vis = torch.stack([emb.float()] + [d.float() for d in deepstack]).cpu().numpy()
        for what, new, f in [("vision", vis, c["vision_file"]), ("logits", logits, c["logits_file"])]:
            ref = np.fromfile(os.path.join(out, f), dtype="<f4").reshape(new.shape)
            err = float(np.abs(new - ref).max()) / float(np.abs(ref).max())
            print(f"{name} {c['name']}: pixel_values identical, {what} max diff "
                  f"{err:.3g} x max|committed|")


def jpeg_case(name, spec, model, out, device):
    """Adds (or remakes) the JPEG case of one model directory whose other cases exist."""
    from transformers import Qwen2VLImageProcessorFast
    proc = Qwen2VLImageProcessorFast.from_pretrained(out)
    path = os.path.join(out, "fixture_images.json")
    with open(path) as f:
        fx = json.load(f)
    cases = [c for c in fx["cases"] if c["name"] != JPEG_CASE]
    check_committed(name, model, proc, out, cases, device)
    file, h, w, seed = JPEG_PICTURE
    make_photo(h, w, seed).save(os.path.join(out, file), "JPEG", **JPEG_SAVE)
    picture = Image.open(os.path.join(out, file)).convert("RGB")
    g = torch.Generator().manual_seed(spec["seed"] + 5)
    case = image_case(name, model, proc, out, JPEG_CASE, [(file, picture, (h, w))], g, device)
    case.update(jpeg=dict(JPEG_SAVE, pillow=Image.__version__),
                made_with=dict(torch=torch.__version__, transformers=transformers.__version__,
                               device=device))
    # img_two stays the last case: the CLI tests take its ids from the end of the file.
    cases.insert(len(cases) - 1, case)
    fx["cases"] = cases
    with open(path, "w") as f:
        json.dump(fx, f, indent=1)


def add_jpeg_case(out_root, device):
    for name, spec in MODELS.items():
        out = os.path.join(out_root, name)
        model = Qwen3VLForConditionalGeneration.from_pretrained(
            out, dtype=torch.float32, attn_implementation="eager")
        model.eval().to(device)
        jpeg_case(name, spec, model, out, device)

def main():
    jpeg = len(sys.argv) == 3 and sys.argv[1] == "--add-jpeg-case"
    if len(sys.argv) != 2 + jpeg:
        print(__doc__)
        return 2
    out_root = sys.argv[-1]
    device = os.environ.get("QVL_FIXTURE_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu")
    # Full float32 matrix products on the GPU (no TF32).
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    if jpeg:
        add_jpeg_case(out_root, device)
        return 0
    for name, spec in MODELS.items():
        out = os.path.join(out_root, name)
        os.makedirs(out, exist_ok=True)
        cfg = make_config(spec)
        gen = torch.Generator().manual_seed(spec["seed"])
        model = Qwen3VLForConditionalGeneration(cfg)
        randomize(model, spec["std"], gen)
        tied = spec["text"]["tie_word_embeddings"]
        if tied:
            model.tie_weights()
        # The file stores bf16. The oracle is the model as a user loads it from this directory,
        # in float32: exactly the bf16-rounded weights, with rotary tables computed in float32
        # (casting a live model to bf16 and back would also round its inv_freq buffers).
        sd = state_dict_for_file(model, tied)
        save_file(sd, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
        cfg.save_pretrained(out)
        del model
        model = Qwen3VLForConditionalGeneration.from_pretrained(
            out, dtype=torch.float32, attn_implementation="eager")
        model.eval().to(device)
        with open(os.path.join(out, "generation_config.json"), "w") as f:
            json.dump({"bos_token_id": 0, "eos_token_id": [1], "do_sample": False}, f, indent=2)

        vocab = spec["text"]["vocab_size"]
        g = torch.Generator().manual_seed(spec["seed"] + 1)
        cases = []
        for ci, n_prompt in enumerate([1, 7, 23]):
            ids = torch.randint(8, vocab - 8, (n_prompt,), generator=g).tolist()
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([ids], device=device)).logits[0].float().cpu()
            lf = f"case{ci}.logits"
            logits.numpy().astype("<f4").tofile(os.path.join(out, lf))
            cont, margin = greedy(model, ids, N_GREEDY, device)
            cases.append(dict(name=f"case{ci}", prompt_ids=ids, greedy_ids=cont,
                              logits_file=lf, n_prompt=n_prompt, vocab=vocab,
                              min_greedy_margin=margin,
                              max_abs_logit=float(logits.abs().max())))
            print(f"{name} case{ci}: n_prompt={n_prompt} greedy={cont} min margin={margin:.4f}")
        with open(os.path.join(out, "fixture.json"), "w") as f:
            json.dump(dict(model=name, torch_version=torch.__version__,
                           transformers_version=transformers.__version__,
                           device=device, compute_dtype="float32", weight_dtype="bfloat16",
                           cases=cases), f, indent=1)
        image_cases(name, spec, model, out, device)
        jpeg_case(name, spec, model, out, device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
