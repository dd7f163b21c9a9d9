#!/usr/bin/env python3
"""Make the video parity fixtures for qvl (tests/fixtures/README.md, "Video cases").

A video here is a list of frames (PNG files) with a frame rate, given to transformers the way a
decoded video reaches its processor: a uint8 array [frames, h, w, 3] with video_metadata
{total_num_frames, fps}, frame sampling on. A file case (vid_file) is a video file of
tests/fixtures/videos/files decoded by transformers' own loader, load_video(path,
backend="pyav"), whose frames and metadata then reach the processor the same way (the
processor's default loader is torchcodec, which torch 2.11's environment here lacks). Qwen3VLProcessor (Qwen3VLVideoProcessor + the
fixture's tokenizer.json) makes the prompt ids, with the "<t seconds>" text of each frame
group; the committed model of each fixture directory (loaded in float32) gives the positions
(get_rope_index), the vision encoder output and the logits.

Writes, under OUT_DIR (tests/fixtures):

  videos/<case>/NNN.png                the given frames (shared by both models)
  videos/<case>.pixels8                uint8 [rows, 1536]: pixel_values_videos as the byte v
                                       each value came from ((v / 255 - 0.5) / 0.5 in float32;
                                       checked exactly here)
  <model>/video_preprocessor_config.json
  <model>/fixture_videos.json          per case: frames, fps, sampled indices, grids, text,
                                       prompt ids, positions, greedy ids, file names
  <model>/<case>.vision                float32 [1 + n_deepstack, n_video_tokens, out_hidden]
  <model>/<case>.logits                float32 [LAST_ROWS, vocab]: the logits of the prompt's
                                       last LAST_ROWS positions

Needs torch, torchvision, transformers (5.x), PIL, numpy and PyAV (av); runs on the CPU.
Usage:  python3 scripts/make_video_fixtures.py OUT_DIR
"""
import json
import os
import sys

import av
import numpy as np
import torch
import transformers
from PIL import Image
from transformers import (PreTrainedTokenizerFast, Qwen2VLImageProcessorFast,
                          Qwen3VLForConditionalGeneration, Qwen3VLProcessor,
                          Qwen3VLVideoProcessor)

MODELS = ["tiny-tied", "tiny-untied"]
N_GREEDY = 6
LAST_ROWS = 8

# Small bounds so the tiny models see few tokens. size bounds t_bar * h * w over all frames.
VIDEO_PREPROCESSOR = {
    "size": {"shortest_edge": 4096, "longest_edge": 24576},
    "patch_size": 16, "temporal_patch_size": 2, "merge_size": 2,
    "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
    "do_rescale": True, "rescale_factor": 1.0 / 255, "do_normalize": True,
    "do_resize": True, "do_convert_rgb": True, "resample": 3,
    "fps": 2, "min_frames": 4, "max_frames": 8, "do_sample_frames": True,
    "cap_pixels_per_frame": False,
    "video_processor_type": "Qwen3VLVideoProcessor",
}

# case -> (frames, height, width, frame rate, seed, pictures before it).
#   vid_short: 10 frames at 4 fps keep int(10 / 4 * 2) = 5: an odd count (the last frame is
#              repeated; t_bar = round(2.5) * 2 = 4 rounds half to even);
#   vid_cap:   20 frames at 2 fps would keep 20: max_frames caps it at 8, and 8 x 64 x 64 is
#              over longest_edge, so the frames are scaled down (48 -> 32 wide, antialiased);
#   vid_wide:  6 frames of 40 x 120 (all kept: fewer than fps asks for), 32 x 128 after resize;
#   vid_mixed: a picture, then vid_short's frames: features and positions of both kinds.
VIDEOS = {
    "vid_short": (10, 32, 64, 4.0, 31),
    "vid_cap": (20, 64, 48, 2.0, 32),
    "vid_wide": (6, 40, 120, 1.0, 33),
}
CASES = [("vid_short", "vid_short", []), ("vid_cap", "vid_cap", []),
         ("vid_wide", "vid_wide", []), ("vid_mixed", "vid_short", ["small.png"])]
# case -> video file under videos/ (scripts/make_video_clips.sh): the H.264 MP4, 10 frames of
# 64 x 48 at 8 fps, 4 kept (min_frames).
FILE_CASES = {"vid_file": "files/h264.mp4"}

QUESTION = " What happens?"


def make_frame(h, w, k, seed):
    """A pattern that moves from frame to frame (ramps, a moving bar, a checkerboard) with mild
    noise: every resampling tap and every frame matters."""
    rng = np.random.RandomState(seed * 1000 + k)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    r = 255 * ((x + 3 * k) % w) / max(1, w - 1)
    g = 255 * (0.5 + 0.5 * np.sin(y / 4.0 + k / 2.0))
    b = 255 * (((x + k) // 8 + y // 8) % 2)
    bar = (np.abs(x - (5 * k) % w) < 3)[..., None]
    img = np.stack([r, g, b], axis=-1)
    img = np.where(bar, 255.0, img) + rng.uniform(-4, 4, size=(h, w, 3))
    return Image.fromarray(np.clip(np.rint(img), 0, 255).astype(np.uint8), "RGB")


def write_frames(root, case, n, h, w, seed):
    d = os.path.join(root, "videos", case)
    os.makedirs(d, exist_ok=True)
    names = []
    for k in range(n):
        name = f"{k:03d}.png"
        make_frame(h, w, k, seed).save(os.path.join(d, name))
        names.append(name)
    # Read back as a user's files are read.
    frames = [np.asarray(Image.open(os.path.join(d, f)).convert("RGB")) for f in names]
    return names, np.stack(frames)


def make_processor(model_dir):
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(model_dir, "tokenizer.json"))
    return Qwen3VLProcessor(image_processor=Qwen2VLImageProcessorFast.from_pretrained(model_dir),
                            tokenizer=tok,
                            video_processor=Qwen3VLVideoProcessor.from_pretrained(model_dir))


def pixel_codes(pixel_values):
    """The uint8 each value came from, checked exactly against the processor's formula."""
    px = pixel_values.numpy()
    codes = np.rint(px * 127.5 + 127.5).astype(np.int64)
    assert codes.min() >= 0 and codes.max() <= 255
    back = ((codes.astype(np.float32) - np.float32(127.5)) / np.float32(127.5)).astype(np.float32)
    assert np.array_equal(back, px), "pixel values are not (v - 127.5) / 127.5 of bytes"
    return codes.astype(np.uint8)


def forward(model, inputs):
    keys = ["input_ids", "pixel_values", "image_grid_thw", "pixel_values_videos",
            "video_grid_thw", "mm_token_type_ids", "attention_mask"]
    kw = {k: inputs[k] for k in keys if k in inputs}
    return model(**kw).logits[0].float()


def greedy(model, inputs, n):
    inputs = dict(inputs)
    out, margins = [], []
    for _ in range(n):
        with torch.no_grad():
            logits = forward(model, inputs)[-1]
        top = torch.topk(logits, 2)
        margins.append(float(top.values[0] - top.values[1]))
        nxt = int(top.indices[0])
        out.append(nxt)
        for k in ("input_ids", "mm_token_type_ids", "attention_mask"):
            if k in inputs:
                v = nxt if k == "input_ids" else (0 if k == "mm_token_type_ids" else 1)
                inputs[k] = torch.cat([inputs[k], torch.tensor([[v]], dtype=inputs[k].dtype)], 1)
    return out, min(margins)


def load_file(root, rel):
    """transformers' PyAV loader: every frame as rgb24 and the stream's metadata."""
    from transformers.video_utils import load_video
    video, meta = load_video(os.path.join(root, "videos", rel), backend="pyav")
    return video, dict(total_num_frames=int(meta.total_num_frames), fps=float(meta.fps))


def run_case(model_name, model, proc, out, root, case, video, pictures, frames, meta):
    cfg = model.config
    text = "<|im_start|>user\n"
    text += "<|vision_start|><|image_pad|><|vision_end|>" * len(pictures)
    text += "<|vision_start|><|video_pad|><|vision_end|>" + QUESTION
    text += "<|im_end|>\n<|im_start|>assistant\n"
    images = [Image.open(os.path.join(out, p)).convert("RGB") for p in pictures] or None
    inputs = proc(text=[text], images=images, videos=[frames], video_metadata=[dict(meta)],
                  do_sample_frames=True, return_tensors="pt")
    ids = inputs["input_ids"][0].tolist()
    # The processor drops the metadata; the video processor alone returns the kept indices.
    vmeta = proc.video_processor(videos=[frames], video_metadata=[dict(meta)],
                                 do_sample_frames=True, return_metadata=True)["video_metadata"]
    grid = inputs["video_grid_thw"]
    pos, delta = model.model.get_rope_index(
        inputs["input_ids"], inputs["mm_token_type_ids"], inputs.get("image_grid_thw"),
        grid, attention_mask=inputs.get("attention_mask"))
    pv = inputs["pixel_values_videos"].float()
    if not pictures:
        pixel_codes(pv).tofile(os.path.join(root, "videos", case + ".pixels8"))
    with torch.no_grad():
        feats = []
        if pictures:
            o = model.model.visual(inputs["pixel_values"].float(), grid_thw=inputs["image_grid_thw"])
            feats.append([o.pooler_output] + list(o.deepstack_features))
        o = model.model.visual(pv, grid_thw=grid)
        feats.append([o.pooler_output] + list(o.deepstack_features))
        vis = torch.stack([torch.cat([f[i] for f in feats]) for i in range(len(feats[0]))])
        logits = forward(model, inputs).cpu()
    vis.float().numpy().astype("<f4").tofile(os.path.join(out, case + ".vision"))
    logits[-LAST_ROWS:].numpy().astype("<f4").tofile(os.path.join(out, case + ".logits"))
    cont, margin = greedy(model, inputs, N_GREEDY)
    n_frames, h, w, fps = meta["total_num_frames"], frames.shape[1], frames.shape[2], meta["fps"]
    indices = [int(i) for i in vmeta[0].frames_indices]
    print(f"{model_name} {case}: grid={grid.tolist()} indices={indices} n_prompt={len(ids)} "
          f"greedy={cont} margin={margin:.4f}")
    file_case = case in FILE_CASES
    return dict(name=case, video=video,
                frames=[] if file_case else [f"{k:03d}.png" for k in range(n_frames)],
                video_file=f"../videos/{FILE_CASES[case]}" if file_case else None,
                total_num_frames=n_frames, frame_size=[h, w], fps=fps, pictures=pictures,
                image_grid_thw=inputs["image_grid_thw"].tolist() if pictures else [],
                sampled_indices=indices, video_grid_thw=grid.tolist(), text=text,
                prompt_ids=ids, n_prompt=len(ids), positions=pos[:, 0, :].tolist(),
                rope_delta=int(delta.flatten()[0]), n_deepstack=len(feats[0]) - 1,
                n_visual_tokens=int(vis.shape[1]),
                pixels_file=None if pictures else f"../videos/{case}.pixels8",
                vision_file=case + ".vision", logits_file=case + ".logits",
                logits_rows=LAST_ROWS, vocab=cfg.text_config.vocab_size, greedy_ids=cont,
                min_greedy_margin=margin, max_abs_logit=float(logits.abs().max()))


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    root = sys.argv[1]
    torch.set_float32_matmul_precision("highest")
    clips = {}
    for video, (n, h, w, fps, seed) in VIDEOS.items():
        names, frames = write_frames(root, video, n, h, w, seed)
        clips[video] = (frames, dict(total_num_frames=n, fps=fps))
    for case, rel in FILE_CASES.items():
        clips[case] = load_file(root, rel)
    for model_name in MODELS:
        out = os.path.join(root, model_name)
        with open(os.path.join(out, "video_preprocessor_config.json"), "w") as f:
            json.dump(VIDEO_PREPROCESSOR, f, indent=2)
        proc = make_processor(out)
        model = Qwen3VLForConditionalGeneration.from_pretrained(
            out, dtype=torch.float32, attn_implementation="eager").eval()
        cases = [run_case(model_name, model, proc, out, root, case, video, pictures,
                          *clips[video]) for case, video, pictures in CASES]
        cases += [run_case(model_name, model, proc, out, root, case, case, [], *clips[case])
                  for case in FILE_CASES]
        with open(os.path.join(out, "fixture_videos.json"), "w") as f:
            json.dump(dict(model=model_name, torch_version=torch.__version__,
                           transformers_version=transformers.__version__, device="cpu",
                           compute_dtype="float32", weight_dtype="bfloat16",
                           pillow_version=Image.__version__, pyav_version=av.__version__,
                           pyav_libavcodec=".".join(map(str, av.library_versions["libavcodec"])),
                           cases=cases), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
