#!/bin/sh
# qvl-graph from the outside: flag errors, the 2B graphs' fusion summary, DOT output that
# Graphviz renders, a backend support check, and a cross-check of the reference backend
# against itself on a tiny config.
# usage: cli_qvl_graph.sh QVL_GRAPH SHARED_DATA_DIR WORK_DIR
set -u
TOOL=$1
CFG2B=$2/qwen3-vl-2b-instruct/config.json
WORK=$(mktemp -d "${3:-/tmp}/cli_qvl_graph.XXXXXX") || exit 1
trap 'rm -rf "$WORK"' EXIT
FAILED=0

fail() {
    echo "FAIL: $*"
    FAILED=1
}

# run EXPECTED_STATUS ARGS...: runs the tool, keeps stdout/stderr in $WORK/out, $WORK/err.
run() {
    want=$1
    shift
    "$TOOL" "$@" >"$WORK/out" 2>"$WORK/err"
    got=$?
    if [ "$got" != "$want" ]; then
        fail "qvl-graph $*: exit $got, expected $want"
        sed 's/^/  stderr: /' "$WORK/err" | head -5
        return 1
    fi
    return 0
}

# The error cases print exactly one line, "qvl-graph: ...", on stderr and nothing on stdout.
one_line_error() {
    lines=$(wc -l <"$WORK/err")
    if [ "$lines" != 1 ] || ! grep -q '^qvl-graph: ' "$WORK/err"; then
        fail "$1: stderr is not one 'qvl-graph: ...' line:"
        sed 's/^/  /' "$WORK/err" | head -5
    fi
    if [ -s "$WORK/out" ]; then fail "$1: wrote to stdout on error"; fi
}

expect_out() { # expect_out LABEL FIXED-STRING
    if ! grep -qF -- "$2" "$WORK/out"; then
        fail "$1: output lacks '$2'"
        sed 's/^/  /' "$WORK/out" | tail -15
    fi
}

# A tiny config: 2 layers, GQA, head_dim != hidden/heads, vision with two deepstack taps.
TINY=$WORK/tiny/config.json
mkdir -p "$WORK/tiny"
cat >"$TINY" <<'EOF'
{ "tie_word_embeddings": true, "image_token_id": 90,
  "text_config": { "vocab_size": 96, "hidden_size": 64, "intermediate_size": 96,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 32, "rms_norm_eps": 1e-06, "max_position_embeddings": 4096,
    "hidden_act": "silu", "dtype": "float32",
    "rope_parameters": {"rope_type": "default", "rope_theta": 5000000,
                        "mrope_section": [6, 5, 5], "mrope_interleaved": true} },
  "vision_config": { "depth": 3, "hidden_size": 32, "intermediate_size": 64,
    "num_heads": 2, "patch_size": 2, "temporal_patch_size": 2,
    "spatial_merge_size": 2, "in_channels": 3, "out_hidden_size": 64,
    "num_position_embeddings": 16, "deepstack_visual_indexes": [0, 2] } }
EOF

# ---- usage errors: exit 2, one line --------------------------------------------------------
run 2 --config "$TINY" --graph text-prefill --bogus && one_line_error "unknown flag"
run 2 --config "$TINY" --graph text-prefill --tokens && one_line_error "missing value"
run 2 --config "$TINY" --graph text-prefill --tokens 12abc && one_line_error "bad number"
run 2 --config "$TINY" --graph text-prefill --tokens 0 && one_line_error "zero tokens"
run 2 --config "$TINY" --graph sideways && one_line_error "bad graph kind"
run 2 --config "$TINY" --graph vision --grid 32by32 && one_line_error "bad grid"
run 2 --config "$TINY" --graph text-decode --format svg && one_line_error "bad format"
run 2 --graph text-decode && one_line_error "no config"
run 2 --config "$TINY" --graph text-decode --kv-type q4 && one_line_error "bad KV type"
run 2 --config "$TINY" --graph vision --kv-type f16 && one_line_error "KV type on the vision graph"
run 2 --config "$TINY" --graph text-prefill --cross-check reference && one_line_error "one backend"
run 0 --help && expect_out "help" "usage: qvl-graph"

# ---- failures: exit 1, one line ------------------------------------------------------------
run 1 --config "$WORK/absent/config.json" --graph text-decode && one_line_error "missing config"
printf '{"text_config": {"hidden_size": 64}}' >"$WORK/bad.json"
run 1 --config "$WORK/bad.json" --graph text-decode && one_line_error "invalid config"
run 1 --config "$TINY" --graph text-decode --plugins /nonexistent/plugins.yaml &&
    one_line_error "missing plugins file"
grep -qF /nonexistent/plugins.yaml "$WORK/err" || fail "plugins error does not name the file"
run 1 --config "$TINY" --graph text-decode --backend no_such_backend && one_line_error "unknown backend"
run 1 --config "$TINY" --graph vision --grid 5x4 && one_line_error "grid not in merge windows"

# ---- the tiny config ---------------------------------------------------------------------
if run 0 --config "$TINY" --graph text-prefill --tokens 4; then
    expect_out "tiny prefill" "== graph before fusion"
    expect_out "tiny prefill" "== graph after fusion"
    expect_out "tiny prefill" "planned peak activation memory"
fi
if run 0 --config "$WORK/tiny" --graph text-decode --kv 16 --stats; then
    expect_out "tiny decode stats" "decoder layers: 2, each with norm_linear x2, attention x1, mlp_residual x2, norm_rope x2"
fi
if run 0 --config "$TINY" --graph vision --grid 4x4 --grid 4x6 --stats; then
    expect_out "tiny vision stats" "vision blocks: 3, each with norm_linear x2, attention x1, mlp_residual x2"
    expect_out "tiny vision stats" "deepstack taps after blocks 0, 2"
fi
if run 0 --config "$TINY" --graph text-decode --kv 16 --no-fuse --stats; then
    expect_out "no-fuse" "decoder layers: 2, each with no fused ops"
fi
if run 0 --config "$TINY" --graph text-decode --kv 16 --backend reference; then
    expect_out "backend check" "backend reference"
    expect_out "backend check" "supports all"
fi
for g in "text-prefill --tokens 5" "text-decode --kv 7" "vision --grid 4x4,4x6"; do
    # shellcheck disable=SC2086
    if run 0 --config "$TINY" --graph $g --cross-check reference,reference --seed 3; then
        expect_out "cross-check $g" "cross-check: OK"
        # stderr is not a terminal: one plain progress line per node, 1/N up to N/N
        total=$(sed -n 's|^cross-check: node 1/\([0-9]*\) .*|\1|p' "$WORK/err")
        lines=$(grep -c '^cross-check: node [0-9]*/' "$WORK/err")
        if [ -z "$total" ] || [ "$lines" != "$total" ] || grep -q "$(printf '\r')" "$WORK/err" ||
            ! grep -q "^cross-check: node $total/$total " "$WORK/err"; then
            fail "cross-check $g: progress lines ($lines, total '$total'):"
            head -3 "$WORK/err"
        fi
    fi
done

# DOT output renders (the tiny config: Graphviz needs minutes for all 28 layers of the 2B).
if command -v dot >/dev/null 2>&1; then
    for g in "text-prefill --tokens 3" "vision --grid 4x4"; do
        # shellcheck disable=SC2086
        if run 0 --config "$TINY" --graph $g --format dot; then
            if ! dot -Tsvg "$WORK/out" >"$WORK/graph.svg" 2>"$WORK/dot.err"; then
                fail "dot -Tsvg rejected the DOT output of $g: $(head -3 "$WORK/dot.err")"
            elif ! grep -q '<svg' "$WORK/graph.svg"; then
                fail "dot produced no SVG for $g"
            fi
        fi
    done
else
    echo "skipped: dot (graphviz) is not installed"
fi

# The KV cache is f16 unless --kv-type says otherwise, as in qvl run: its inputs are half
# of f32's (the decode graph's inputs are almost all cache).
kv_mib() { sed -n 's/.*KV caches included): \([0-9.]*\) MiB.*/\1/p' "$WORK/out"; }
if run 0 --config "$TINY" --graph text-decode --kv 4096 --stats; then
    f16=$(kv_mib)
    if run 0 --config "$TINY" --graph text-decode --kv 4096 --kv-type f32 --stats; then
        f32=$(kv_mib)
        awk -v a="$f16" -v b="$f32" 'BEGIN { exit !(a > 0 && b > 1.9 * a && b < 2.1 * a) }' ||
            fail "KV inputs: default $f16 MiB, f32 $f32 MiB (expected the default to be f16)"
    fi
fi

# ---- the shared 2B config ----------------------------------------------------------------
if [ -r "$CFG2B" ]; then
    if run 0 --config "$CFG2B" --graph text-prefill --tokens 32 --stats; then
        expect_out "2B prefill" "decoder layers: 28, each with norm_linear x2, attention x1, mlp_residual x2, norm_rope x2"
    fi
    if run 0 --config "$CFG2B" --graph text-decode --stats; then
        expect_out "2B decode" "decoder layers: 28, each with norm_linear x2, attention x1, mlp_residual x2, norm_rope x2"
    fi
    if run 0 --config "$CFG2B" --graph vision --grid 32x32 --stats; then
        expect_out "2B vision" "vision blocks: 24, each with norm_linear x2, attention x1, mlp_residual x2"
        expect_out "2B vision" "deepstack taps after blocks 5, 11, 17"
    fi
    # The real graphs render too (each input/weight is drawn beside its reader, so the layout
    # takes seconds, not minutes).
    if command -v dot >/dev/null 2>&1; then
        for g in "text-decode" "vision --grid 32x32"; do
            # shellcheck disable=SC2086
            if run 0 --config "$CFG2B" --graph $g --format dot; then
                if ! timeout 300 dot -Tsvg "$WORK/out" >"$WORK/graph.svg" 2>"$WORK/dot.err" ||
                    ! grep -q '<svg' "$WORK/graph.svg"; then
                    fail "dot -Tsvg did not render the 2B $g graph: $(head -3 "$WORK/dot.err")"
                fi
            fi
        done
    fi
else
    echo "skipped the 2B checks: $CFG2B is absent"
fi

if [ "$FAILED" = 0 ]; then echo "cli_qvl_graph: all checks passed"; fi
exit "$FAILED"
