/* The GGUF reader's object, shared by gguf_read.c (parsing) and gguf_lookup.c (queries). */
#ifndef QVL_GGUF_INTERNAL_H
#define QVL_GGUF_INTERNAL_H

#include "qvl/gguf.h"

struct qvl_gguf {
    char *path;
    const unsigned char *map;
    size_t map_size;
    int map_slot;                     /* qvl_mapped_register's slot: SIGBUS names this file */
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;
    qvl_gguf_kv *kvs;                 /* file order */
    size_t n_kv;
    const qvl_gguf_kv **kv_by_key;    /* sorted by key, for find */
    qvl_gguf_tensor *tensors;         /* file order */
    size_t n_tensors;
    const qvl_gguf_tensor **by_name;  /* sorted by name, for find */
    void **blocks;                    /* the strs/items arrays of array values, freed at close */
    size_t n_blocks, cap_blocks;
    uint64_t indexed;                 /* string and array elements indexed so far */
};

#endif
