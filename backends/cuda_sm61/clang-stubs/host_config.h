/* Stand-in for the clang sm_61 device-only compile check (see ../CMakeLists.txt), never used
 * by nvcc. CUDA 12+ removed the texture<> template and texture_fetch_functions.h that clang's
 * CUDA wrapper headers still expect; this header is found before the toolkit's own
 * host_config.h (which it includes), and adds an empty texture<> so the wrapper compiles.
 * Our kernels use no textures. */
#include_next "host_config.h"
#include "texture_types.h"
template <class T, int dim = 1, enum cudaTextureReadMode mode = cudaReadModeElementType>
struct texture {};
