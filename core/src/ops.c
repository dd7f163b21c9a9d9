/* The op table, generated from ops.def: names, input slots and their names, the params member
 * each op reads. Shape inference (ops_infer.c) reads it through ops.h and ops_table.h. */
#include "qvl/ops.h"

#include <string.h>

#include "ops_table.h"

/* ---- the table --------------------------------------------------------------------------- */

typedef struct op_info {
    const char *name;
    uint32_t max_inputs;
    const char *params; /* member of qvl_params the op reads, "none" without params */
    bool fused;
} op_info;

static const op_info ops[QVL_OP_COUNT] = {
#define PRIMITIVE false
#define FUSED true
#define QVL_OP(id, name, max_in, pm, kind) [QVL_OP_##id] = {name, max_in, #pm, kind},
#include "qvl/ops.def"
#undef QVL_OP
#undef PRIMITIVE
#undef FUSED
};

#define QVL_OP(id, name, max_in, pm, kind) \
    _Static_assert((max_in) >= 1 && (max_in) <= QVL_MAX_SRC, "ops.def: bad max_inputs for " #id);
#include "qvl/ops.def"
#undef QVL_OP

static bool op_valid(qvl_op op) {
    return (int)op >= 0 && op < QVL_OP_COUNT;
}

const char *qvl_op_name(qvl_op op) {
    return op_valid(op) ? ops[op].name : "?";
}

const char *qvl_act_name(int32_t act) {
    switch (act) {
    case QVL_ACT_NONE: return "none";
    case QVL_ACT_SILU: return "silu";
    case QVL_ACT_GELU_TANH: return "gelu_tanh";
    case QVL_ACT_GELU_ERF: return "gelu_erf";
    default: return "?";
    }
}

uint32_t qvl_op_max_inputs(qvl_op op) {
    return op_valid(op) ? ops[op].max_inputs : 0;
}

bool qvl_op_is_fused(qvl_op op) {
    return op_valid(op) && ops[op].fused;
}

bool qvl_op_is_view(qvl_op op) {
    return op == QVL_OP_VIEW;
}

bool qvl_op_parse(const char *name, qvl_op *out) {
    if (!name) return false;
    for (int i = 0; i < QVL_OP_COUNT; i++) {
        if (strcmp(name, ops[i].name) == 0) {
            if (out) *out = (qvl_op)i;
            return true;
        }
    }
    return false;
}

/* Names of the input slots, for messages ("input 1 (w)"). */
static const char *const slot_names[QVL_OP_COUNT][QVL_MAX_SRC] = {
    [QVL_OP_GET_ROWS] = {"table", "ids"},
    [QVL_OP_MATMUL] = {"a", "w", "bias"},
    [QVL_OP_ADD] = {"a", "b"},
    [QVL_OP_MUL] = {"a", "b"},
    [QVL_OP_SCALE] = {"x"},
    [QVL_OP_RMS_NORM] = {"x", "gamma"},
    [QVL_OP_LAYER_NORM] = {"x", "gamma", "beta"},
    [QVL_OP_ROPE] = {"x", "pos"},
    [QVL_OP_SOFTMAX] = {"x"},
    [QVL_OP_SILU] = {"x"},
    [QVL_OP_GELU_TANH] = {"x"},
    [QVL_OP_GELU_ERF] = {"x"},
    [QVL_OP_MASK_CAUSAL] = {"s"},
    [QVL_OP_MASK_SEGMENTS] = {"s", "seg"},
    [QVL_OP_VIEW] = {"x"},
    [QVL_OP_CONT] = {"x"},
    [QVL_OP_STORE_ROWS] = {"dst", "src"},
    [QVL_OP_NORM_LINEAR] = {"x", "gamma", "beta", "w1", "b1", "w2", "b2", "w3", "b3"},
    [QVL_OP_ATTENTION] = {"q", "k", "v", "seg"},
    [QVL_OP_MLP_RESIDUAL] = {"res", "a", "w_down", "up", "b_down"},
    [QVL_OP_SET_ROWS] = {"x", "idx", "src"},
    [QVL_OP_ADD_ROWS] = {"x", "idx", "src"},
    [QVL_OP_STORE_ROWS_AT] = {"dst", "src", "at"},
    [QVL_OP_MASK_CAUSAL_AT] = {"s", "at"},
    [QVL_OP_NORM_ROPE] = {"x", "pos", "gamma"},
    [QVL_OP_STORE_SLOT_ROWS] = {"dst", "src", "slot", "at"},
    [QVL_OP_ATTENTION_SLOTS] = {"q", "k", "v", "slot", "at"},
    [QVL_OP_ARGMAX] = {"x"},
};

const char *qvl_op_slot_name(qvl_op op, uint32_t slot) {
    const char *name = op_valid(op) && slot < QVL_MAX_SRC ? slot_names[op][slot] : NULL;
    return name ? name : "?";
}

const char *ops_params_member(qvl_op op) {
    return op_valid(op) ? ops[op].params : "none";
}
