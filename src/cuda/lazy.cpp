// CUDA libraries loaded on first use (cuda/lazy.h).
#include "edp/config.h"

#if EDP_HAVE_CUDA
#include "cuda/lazy.h"

#include <dlfcn.h>

#include <map>
#include <mutex>
#include <string>

#include "edp/core/error.h"

namespace edp::cuda::lazy {

void* symbol(const char* library, const char* name) {
  static std::mutex mu;
  static std::map<std::string, void*> handles;
  std::lock_guard<std::mutex> lock(mu);
  void*& h = handles[library];
  if (!h) {
    std::string why;
    h = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      why = dlerror();
      // The toolkit's directory at build time, for a process whose library path lacks it.
      const std::string at = std::string(EDP_CUDA_LIBRARY_DIR) + "/" + library;
      h = dlopen(at.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!h) why += "; " + std::string(dlerror());
    }
    if (!h)
      throw Error(std::string("cannot load ") + library + " (a GPU op needs it): " + why +
                  ". Install the CUDA toolkit's libraries or put their directory on LD_LIBRARY_PATH");
  }
  dlerror();
  void* f = dlsym(h, name);
  if (!f) throw Error(std::string(library) + " has no symbol " + name + ": " + dlerror());
  return f;
}

}  // namespace edp::cuda::lazy
#endif  // EDP_HAVE_CUDA
