#!/usr/bin/env bash
# The open speed figures of the issues in one sitting beside llama.cpp on the GPU machine
# (docs/BENCHMARKS.md, "Beside llama.cpp"): batched decode against llama-batched-bench (#33),
# qvl on llama.cpp's own Q4_K_M file (#35: speed, memory, logits against the safetensors path),
# the mask's share of a GPU decode step (#38: `qvl run -v`'s timings: mask line), a 10-second
# 640x360 video's first token (#36), then 4 CPU threads: batched, pp128/pp512, the photo
# question and the video (#37, #36). First the tests no CI machine runs: the cuda_sm61 ctest
# entries (conformance variants, test_cuda_backend, ...) and the parity tests on cuda_sm61.
# Needs .bench (the llama-compare kit's trim.sh) and .devdeps carried, and for the parity tests
# the shared test data (carry a copy as .shared-data, or set QVL_SHARED_DATA_DIR); run from the
# project root, and again at once to resume (each item runs once per machine; DEADLINE
# seconds, default 565, bound one call; SKIP="ID ..." leaves items out).
set -u
T0=$(date +%s); ROOT=$(pwd); B=$ROOT/.bench; M=/tmp/m2b; LB=/tmp/llb; QB=/tmp/qb; OUT=${OUT:-/tmp/out}; mkdir -p $OUT
DEADLINE=${DEADLINE:-565}; Q=/tmp/m2b-q4_k_m.gguf
log() { echo "== +$(( $(date +%s) - T0 ))s $*"; }
left() { [ $(( $(date +%s) - T0 )) -lt "$DEADLINE" ]; }
. scripts/device-deps.sh env
for s in ${SKIP:-}; do touch /tmp/done.$s; done
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; echo "llama.cpp $(cat $B/llama/COMMIT); qvl $(git rev-parse --short HEAD)"
if [ ! -f /tmp/llb.started ]; then
  touch /tmp/llb.started; log "llama.cpp build (bg)"
  setsid nohup bash -c "cmake -S $B/llama -B $LB -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
     -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF \
     -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_APP=OFF >/tmp/llb.log 2>&1 \
     && cmake --build $LB -j11 --target llama-bench llama-quantize llama-mtmd-cli llama-batched-bench >>/tmp/llb.log 2>&1; echo \$? >/tmp/llb.done" >/dev/null 2>&1 &
fi
if [ ! -x $QB/tools/qvl-bench ]; then
  log "qvl build"; { cmake -S $ROOT -B $QB -DCMAKE_BUILD_TYPE=Release && cmake --build $QB -j5; } >$OUT/qvl-build.log 2>&1 || { tail -30 $OUT/qvl-build.log; exit 1; }
fi
[ -f $M/model.safetensors ] || { log "random 2B"; python3 $B/tools/make_2b.py $M 2>&1 | tail -1; cp $B/tools/tokenizer.json $M/tokenizer.json; }
[ -f /tmp/m2b-f16.gguf ] || { log "GGUF f16"; python3 $B/llama/convert_hf_to_gguf.py $M --outtype f16 --outfile /tmp/m2b-f16.gguf >>/tmp/convert.log 2>&1 || tail -3 /tmp/convert.log; }
[ -f /tmp/mmproj-f16.gguf ] || { log "GGUF mmproj"; python3 $B/llama/convert_hf_to_gguf.py $M --mmproj --outtype f16 --outfile /tmp/mmproj-f16.gguf >>/tmp/convert.log 2>&1 || tail -3 /tmp/convert.log; }
if [ ! -d /tmp/frames ]; then
  log "frames: 10 s 640x360 at 30 fps"
  python3 -c "
import os, numpy as np
from PIL import Image
os.makedirs('/tmp/frames', exist_ok=True)
rng = np.random.default_rng(1); base = rng.integers(0, 255, (360, 640, 3), dtype=np.uint8)
for i in range(300): Image.fromarray(np.roll(base, 4 * i, axis=1)).save(f'/tmp/frames/{i:04d}.png', compress_level=1)"
fi
if [ ! -f /tmp/done.gpu-tests ]; then # while llama.cpp builds: what no CI machine runs
  touch /tmp/done.gpu-tests; log "GPU tests: cuda_sm61 ctest entries, parity on cuda_sm61"
  (cd $QB && QVL_SHARED_DATA_DIR=${QVL_SHARED_DATA_DIR:-$ROOT/.shared-data} \
     QVL_PARITY_BACKENDS=reference,cuda_sm61 ctest -j6 --timeout 300 \
     -R 'shared_data|cuda|decode_batch|prefill_batch|seq_copy|^test_parity$|test_engine|vision_parity' \
     >$OUT/gpu-tests.txt 2>&1)
  grep -E "tests passed|\(Failed|\*\*\*Failed|Not Run|Timeout" $OUT/gpu-tests.txt | head -20
fi
log "waiting for llama.cpp"
while [ ! -f /tmp/llb.done ] && left; do sleep 3; done
[ "$(cat /tmp/llb.done 2>/dev/null)" = 0 ] || { log "llama.cpp not built yet: call again"; tail -2 /tmp/llb.log | cut -c1-100; exit 0; }
[ -f $Q ] || { log "llama-quantize Q4_K_M"; $LB/bin/llama-quantize /tmp/m2b-f16.gguf $Q Q4_K_M >/tmp/quant.log 2>&1 || tail -3 /tmp/quant.log; }
peak() { local id=$1; shift
  ( while :; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits; sleep 0.05; done ) >/tmp/mem.$id 2>/dev/null & local sp=$!
  "$@" >$OUT/$id.txt 2>&1; kill $sp; wait $sp 2>/dev/null
  echo "[$id] peak GPU memory $(sort -n /tmp/mem.$id | tail -1) MiB (idle $(sort -n /tmp/mem.$id | head -1))"; }
run1() { local id=$1; shift; [ -f /tmp/done.$id ] && return 0; left || return 1; log "$id"; peak "$id" "$@"; touch /tmp/done.$id
  grep -E "^\| +[0-9]+ \||^\| .*(pp|tg)[0-9]|prefill  |decode |vision [0-9]|first token|timings: (prefill|decode|first|vision)|mask|video|encoded in|decoded in|prompt eval time|  eval time|roofline|probe" $OUT/$id.txt | head -14; }
QB1="--no-profile --no-probe -p 128 -n 128 -r 2"
run1 b-llama-q4-1 $LB/bin/llama-batched-bench -m $Q -ngl 99 -fa 1 -c 16384 -b 2048 -ub 512 -npp 128 -ntg 128 -npl 1,2,4,8
for n in 2 4 8; do run1 b-qvl-q4-$n-1 $QB/tools/qvl-bench -m $Q --backend cuda_sm61 $QB1 --parallel $n
  run1 b-qvl-q4-$n-ungrouped env QVL_CUDA_GEMV_GROUP=0 $QB/tools/qvl-bench -m $Q --backend cuda_sm61 $QB1 --parallel $n; done
run1 b-llama-f16 $LB/bin/llama-batched-bench -m /tmp/m2b-f16.gguf -ngl 99 -fa 1 -c 16384 -b 2048 -ub 512 -npp 128 -ntg 128 -npl 1,4,8
for n in 4 8; do run1 b-qvl-bf16-$n $QB/tools/qvl-bench -m $M --backend cuda_sm61 $QB1 --parallel $n
  run1 b-qvl-bf16-$n-noregs env QVL_CUDA_GEMV_REGS=0 $QB/tools/qvl-bench -m $M --backend cuda_sm61 $QB1 --parallel $n; done
# where a batched step's time goes, op by op (qvl-bench's profile of one step: "one batched
# decode step of N sequences")
for n in 4 8; do run1 b-qvl-q4-$n-prof $QB/tools/qvl-bench -m $Q --backend cuda_sm61 --no-probe -p 128 -n 32 -r 1 --parallel $n
  grep -A16 "one batched decode step" $OUT/b-qvl-q4-$n-prof.txt 2>/dev/null | head -18; done
run1 b-qvl-bf16-8-prof $QB/tools/qvl-bench -m $M --backend cuda_sm61 --no-probe -p 128 -n 32 -r 1 --parallel 8
grep -A16 "one batched decode step" $OUT/b-qvl-bf16-8-prof.txt 2>/dev/null | head -18
run1 b-llama-q4-2 $LB/bin/llama-batched-bench -m $Q -ngl 99 -fa 1 -c 16384 -b 2048 -ub 512 -npp 128 -ntg 128 -npl 1,2,4,8
for n in 2 4 8; do run1 b-qvl-q4-$n-2 $QB/tools/qvl-bench -m $Q --backend cuda_sm61 $QB1 --parallel $n; done
# the int8 GEMM's K split (opt-in: QVL_CUDA_I8_SPLIT=auto) on short prompts, as the server's are
for r in a b; do
  run1 p-qvl-q4-128-$r $QB/tools/qvl-bench -m $Q --backend cuda_sm61 --no-profile --no-probe -p 128 -n 8 -r 5
  run1 p-qvl-q4-128-split-$r env QVL_CUDA_I8_SPLIT=auto $QB/tools/qvl-bench -m $Q --backend cuda_sm61 --no-profile --no-probe -p 128 -n 8 -r 5
done
# #38: the mask's share of a decode step (same prompt; plain with --ignore-eos)
for s in plain free bounded; do
  if [ $s = plain ]; then a="--ignore-eos"; else a="--json-schema tools/grammar-bench/$s.json"; fi
  run1 m-$s $QB/tools/qvl run -m $Q --backend cuda_sm61 -p "Read the receipt into JSON." -n 256 --temp 0 $a -v
done
# #36: time to first token, 10 s of 640x360 at 30 fps, default sampling
run1 v-qvl-cuda $QB/tools/qvl run -m $Q --mmproj /tmp/mmproj-f16.gguf --backend cuda_sm61 --video-frames /tmp/frames --video-fps 30 -p "What happens in this video?" -n 16 --temp 0 -v
run1 v-qvl-cuda-st $QB/tools/qvl run -m $M --backend cuda_sm61 --video-frames /tmp/frames --video-fps 30 -p "What happens in this video?" -n 16 --temp 0 -v
# #35: the same Q4_K_M file in both: speed and memory; picture; logits against the safetensors path
run1 g-llama-gguf $LB/bin/llama-bench -m $Q -ngl 99 -fa 1 -p 512 -n 128 -r 3
run1 g-qvl-gguf $QB/tools/qvl-bench -m $Q --backend cuda_sm61 -p 512 -n 128 -r 3 --ctx 4096 --no-profile --no-probe
run1 g-qvl-gguf-img $QB/tools/qvl run -m $Q --mmproj /tmp/mmproj-f16.gguf --backend cuda_sm61 --image $M/img1024x768.png -p "Describe this picture." -n 32 --temp 0 -v
run1 g-llama-gguf-img $LB/bin/llama-mtmd-cli -m $Q --mmproj /tmp/mmproj-f16.gguf -ngl 99 --image $M/img1024x768.png -p "Describe this picture." -n 32 --temp 0
if [ ! -f /tmp/done.logits ] && left; then
  log "logits: the Q4_K_M GGUF vs the safetensors (bf16) and qvl's q4_k_m of it"
  ids=$(python3 -c "import random; r=random.Random(3); print(','.join(str(r.randrange(151000)) for _ in range(64)))")
  $QB/tools/qvl run -m $Q --backend cuda_sm61 --ids "$ids" -n 16 --temp 0 --print-ids --dump-logits /tmp/lg-gguf.bin -q > /tmp/ids-gguf.txt 2>&1
  $QB/tools/qvl run -m $M --backend cuda_sm61 --ids "$ids" -n 16 --temp 0 --print-ids --dump-logits /tmp/lg-bf16.bin -q > /tmp/ids-bf16.txt 2>&1
  $QB/tools/qvl run -m $M --weights q4_k_m --backend cuda_sm61 --ids "$ids" -n 16 --temp 0 --print-ids --dump-logits /tmp/lg-q4.bin -q > /tmp/ids-q4.txt 2>&1
  python3 -c "
import numpy as np
a = {k: np.fromfile(f'/tmp/lg-{k}.bin', dtype='<f4').reshape(-1, 151936) for k in ('gguf', 'bf16', 'q4')}
for x, y in (('gguf', 'bf16'), ('q4', 'bf16'), ('gguf', 'q4')):
    d = np.abs(a[x] - a[y]); m = np.abs(a[y]).max()
    print(f'{x} vs {y}: max |d| {d.max():.4g} ({d.max()/m:.3g} x max|logit|), mean |d| {d.mean():.4g}, argmax agree {np.mean(a[x].argmax(1)==a[y].argmax(1))*100:.1f}%')"
  for k in gguf bf16 q4; do echo "$k ids: $(tail -1 /tmp/ids-$k.txt)"; done; touch /tmp/done.logits
fi
# #33: qvl serve under the load script against the engine's own batched figure above
run1 s-serve-split env QVL_CUDA_I8_SPLIT=auto python3 scripts/serve-load.py --qvl $QB/tools/qvl -m $Q --backend cuda_sm61 --parallel 8 --clients 16 --max-tokens 128 --requests 96
run1 s-serve python3 scripts/serve-load.py --qvl $QB/tools/qvl -m $Q --backend cuda_sm61 --parallel 4,8 --clients 16 --max-tokens 128 --requests 96
# the prompts of a round in one batched prefill (default) against one graph each
run1 s-serve-pb0 env QVL_PREFILL_BATCH=0 python3 scripts/serve-load.py --qvl $QB/tools/qvl -m $Q --backend cuda_sm61 --parallel 8 --clients 16 --max-tokens 128 --requests 96
# where an 8-row decode step's time goes, kernel by kernel, under CUDA graphs (nsys, when there)
NSYS=$(command -v nsys || ls /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems*/*/bin/nsys 2>/dev/null | head -1)
for w in q4 bf16; do
  [ -n "$NSYS" ] && [ ! -f /tmp/done.nsys-$w ] && left || continue
  touch /tmp/done.nsys-$w; if [ $w = q4 ]; then mm=$Q; else mm=$M; fi
  $NSYS profile -o /tmp/nsys-$w -f true --trace cuda --sample none --cpuctxsw none $QB/tools/qvl-bench -m $mm \
    --backend cuda_sm61 --no-profile --no-probe -p 128 -n 64 -r 1 --parallel 8 >$OUT/nsys-$w.log 2>&1
  $NSYS stats -r cuda_gpu_kern_sum -f csv /tmp/nsys-$w.nsys-rep >$OUT/kern-$w-x8.csv 2>>$OUT/nsys-$w.log
  echo "[nsys $w x8]"; head -10 $OUT/kern-$w-x8.csv | cut -c1-200
done
log "end of list (or deadline)"
(cd $OUT && tar czf results-$(date +%s).tgz ./*.txt && rm -f ./*.txt) 2>/dev/null
# CPU, 4 threads (#37 items 2-3, #36): the same Q4_K_M file; the photo question; the video
run1 c-llama-batched env CUDA_VISIBLE_DEVICES= $LB/bin/llama-batched-bench -m $Q -ngl 0 -t 4 -c 4096 -b 2048 -ub 512 -npp 128 -ntg 32 -npl 1,4,8
for n in 4 8; do run1 c-qvl-batched-$n $QB/tools/qvl-bench -m $Q --backend cpu_avx2 -t 4 -p 128 -n 32 -r 1 --parallel $n --no-profile --no-probe; done
for p in 128 512; do
  run1 c-llama-pp$p env CUDA_VISIBLE_DEVICES= $LB/bin/llama-bench -m $Q -ngl 0 -t 4 -p $p -n 32 -r 2
  run1 c-qvl-pp$p $QB/tools/qvl-bench -m $Q --backend cpu_avx2 -t 4 -p $p -n 32 -r 2 --no-profile
done
run1 c-qvl-photo $QB/tools/qvl run -m $Q --mmproj /tmp/mmproj-f16.gguf --backend cpu_avx2 -t 4 --image $M/img1024x768.png -p "Describe this picture." -n 1 --temp 0 -v
run1 c-llama-photo env CUDA_VISIBLE_DEVICES= $LB/bin/llama-mtmd-cli -m $Q --mmproj /tmp/mmproj-f16.gguf -ngl 0 -t 4 --image $M/img1024x768.png -p "Describe this picture." -n 1 --temp 0 -v
# #37 item 1: the vision encode's share of the FMA probe, per op kind (qvl-bench's profile)
run1 c-qvl-vision $QB/tools/qvl-bench -m $Q --mmproj /tmp/mmproj-f16.gguf --backend cpu_avx2 -t 4 --image 1024x768 -p 16 -n 4 -r 1
run1 c-qvl-video $QB/tools/qvl run -m $Q --mmproj /tmp/mmproj-f16.gguf --backend cpu_avx2 -t 4 --video-frames /tmp/frames --video-fps 30 -p "What happens in this video?" -n 1 --temp 0 -v
# #37 item 3: the phone photo (4032x3024, 4015 tokens at the default budget) in both, first token;
# each takes minutes on 4 threads, so each starts only with 330 s of the call left
[ -f /tmp/phone.png ] || python3 -c "
from PIL import Image
Image.open('$M/img1024x768.png').resize((4032, 3024), Image.BICUBIC).save('/tmp/phone.png', compress_level=1)"
for who in qvl llama; do
  [ $(( $(date +%s) - T0 + 330 )) -lt "$DEADLINE" ] || break
  if [ $who = qvl ]; then
    run1 c-qvl-phone $QB/tools/qvl run -m $Q --mmproj /tmp/mmproj-f16.gguf --backend cpu_avx2 -t 4 --image /tmp/phone.png -p "Describe this picture." -n 1 --temp 0 -v
  else
    run1 c-llama-phone env CUDA_VISIBLE_DEVICES= $LB/bin/llama-mtmd-cli -m $Q --mmproj /tmp/mmproj-f16.gguf -ngl 0 -t 4 -c 8192 --image /tmp/phone.png -p "Describe this picture." -n 1 --temp 0 -v
  fi
done
log "end of CPU list (or deadline)"
(cd $OUT && tar czf results-c$(date +%s).tgz ./*.txt && rm -f ./*.txt) 2>/dev/null
