/* Fuzz target: model.safetensors.index.json in the weight store (qvl_weights_open).
 * A temporary model directory holds two small valid shards (model-00001-of-00002.safetensors
 * with the final text norm, model-00002-of-00002.safetensors with lm_head.weight) and no
 * model.safetensors; each input is written as the index and the store is opened with a tiny
 * config (one text layer, one vision block). Checked: no crash, hang, leak or sanitizer report,
 * and a refusal comes with one non-empty error line. The tensors the shards hold are far from
 * the whole model, so an open can only succeed if the checks are broken: that is a finding. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_check.h"
#include "qvl/qwen3vl_config.h"
#include "qvl/weights.h"

static const char tiny_config[] =
    "{\"model_type\":\"qwen3_vl\",\"image_token_id\":508,\"video_token_id\":509,"
    "\"tie_word_embeddings\":true,"
    "\"text_config\":{\"head_dim\":32,\"hidden_size\":64,\"intermediate_size\":160,"
    "\"max_position_embeddings\":4096,\"num_attention_heads\":4,\"num_hidden_layers\":1,"
    "\"num_key_value_heads\":2,\"rms_norm_eps\":1e-06,\"rope_parameters\":{"
    "\"mrope_interleaved\":true,\"mrope_section\":[6,5,5],\"rope_theta\":5000000.0,"
    "\"rope_type\":\"default\"},\"tie_word_embeddings\":true,\"vocab_size\":512},"
    "\"vision_config\":{\"deepstack_visual_indexes\":[0],\"depth\":1,\"hidden_size\":32,"
    "\"in_channels\":3,\"intermediate_size\":64,\"num_heads\":2,\"num_position_embeddings\":64,"
    "\"out_hidden_size\":64,\"patch_size\":16,\"spatial_merge_size\":2,"
    "\"temporal_patch_size\":2}}";

static char dir[256];
static char index_path[320];
static char shard_paths[2][320];
static qvl_qwen3vl_config cfg;

static void cleanup(void) {
    unlink(index_path);
    unlink(shard_paths[0]);
    unlink(shard_paths[1]);
    rmdir(dir);
}

/* A safetensors file holding one F32 tensor of `n` elements called name. */
static int write_shard(const char *path, const char *name, int n) {
    char header[256];
    int hl = snprintf(header, sizeof header,
                      "{\"%s\":{\"dtype\":\"F32\",\"shape\":[%d],\"data_offsets\":[0,%d]}}", name,
                      n, n * 4);
    while (hl % 8) header[hl++] = ' ';
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    uint8_t len[8] = {0};
    for (int i = 0; i < 8; i++) len[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    int ok = fwrite(len, 1, 8, f) == 8 && fwrite(header, 1, (size_t)hl, f) == (size_t)hl;
    for (int i = 0; ok && i < n; i++) {
        const float one = 1.0f;
        ok = fwrite(&one, sizeof one, 1, f) == 1;
    }
    return fclose(f) == 0 && ok ? 0 : -1;
}

static void setup(void) {
    static int done;
    if (done) return;
    done = 1;
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(dir, sizeof dir, "%s/qvl-fuzz-weights-XXXXXX", base);
    qvl_error err = {0};
    if (!mkdtemp(dir) ||
        qvl_qwen3vl_config_parse(tiny_config, sizeof tiny_config - 1, "tiny", &cfg, &err) !=
            QVL_OK) {
        dprintf(2, "fuzz_weights_index: setup failed: %s\n", err.msg);
        abort(); /* the harness itself failed: not a finding */
    }
    snprintf(index_path, sizeof index_path, "%s/model.safetensors.index.json", dir);
    snprintf(shard_paths[0], sizeof shard_paths[0], "%s/model-00001-of-00002.safetensors", dir);
    snprintf(shard_paths[1], sizeof shard_paths[1], "%s/model-00002-of-00002.safetensors", dir);
    if (write_shard(shard_paths[0], "model.language_model.norm.weight", 64) != 0 ||
        write_shard(shard_paths[1], "lm_head.weight", 64) != 0) {
        perror("fuzz_weights_index: shard");
        abort();
    }
    atexit(cleanup);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    setup();
    FILE *f = fopen(index_path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) {
        perror("fuzz_weights_index: index");
        abort();
    }
    qvl_weights *w = NULL;
    qvl_error err = {0};
    qvl_status s = qvl_weights_open(dir, &cfg, &w, &err);
    FUZZ_CHECK(s != QVL_OK); /* the shards never hold the whole model */
    fuzz_check_error(s, &err);
    FUZZ_CHECK(w == NULL);
    return 0;
}
