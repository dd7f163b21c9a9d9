/* Empty stand-in for the header CUDA 12+ removed, for the clang sm_61 check (see
 * host_config.h here). */
