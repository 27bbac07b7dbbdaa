/* kernels/kernels.h's CUDA entry points in builds with CUDA: they open the plugin that holds the
 * backend (kernels/cuda/plugin.h) and call it. It is opened once, and only where an NVIDIA
 * driver is installed, so a CPU run never loads cuDNN or cuBLAS.
 *
 * Where the plugin is looked for, relative to the running program's directory (/proc/self/exe),
 * first hit wins: lib/cifar10-dp/ in it (the build tree: build/ -> build/lib/cifar10-dp), then in
 * its parent (make install: PREFIX/bin -> PREFIX/lib/cifar10-dp; the tests: build/tests). */
#include "cuda/plugin.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const struct cuda_plugin_api *api;

/* dir: the running program's directory. 0, or -1 with e saying why. */
static int program_dir(char *dir, size_t size, struct err *e) {
    ssize_t n = readlink("/proc/self/exe", dir, size - 1);
    if (n <= 0 || (size_t)n >= size - 1) return err_set(e, "cannot read /proc/self/exe");
    dir[n] = '\0';
    char *slash = strrchr(dir, '/');
    if (!slash) return err_set(e, "/proc/self/exe is '%s', not a path", dir);
    *slash = '\0';
    return 0;
}

/* Opens the plugin (once) and checks that it was built with this program's interface. */
static int plugin_open(struct err *e) {
    if (api) return 0;
    static const char *const places[] = {"/lib/cifar10-dp", "/../lib/cifar10-dp"};
    char dir[PATH_MAX], path[PATH_MAX + 64];
    if (program_dir(dir, sizeof dir, e) < 0) return -1;
    void *h = NULL;
    for (size_t i = 0; i < sizeof places / sizeof places[0] && !h; i++) {
        snprintf(path, sizeof path, "%s%s/%s", dir, places[i], CUDA_PLUGIN_FILE);
        if (access(path, F_OK) != 0) continue;
        h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!h) return err_set(e, "the CUDA backend %s cannot be loaded: %s", path, dlerror());
    }
    if (!h)
        return err_set(e, "no CUDA backend (%s) in %s/lib/cifar10-dp or %s/../lib/cifar10-dp",
                       CUDA_PLUGIN_FILE, dir, dir);
    const struct cuda_plugin_api *(*entry)(void);
    *(void **)&entry = dlsym(h, "cuda_plugin_api"); /* POSIX's way to a function pointer */
    const struct cuda_plugin_api *a = entry ? entry() : NULL;
    if (!a || a->version != CUDA_PLUGIN_VERSION || a->kernels_size != sizeof(struct kernels)) {
        dlclose(h);
        return err_set(e, "the CUDA backend %s was built for another version of this program", path);
    }
    api = a; /* never closed: the tables it returns live in it */
    return 0;
}

int kernels_cuda_devices(struct err *e) {
#ifndef CIFAR10_CUDA_EMU /* (make CUDA=emu: the plugin is tests/cudaemu's CPU emulation, no driver) */
    void *driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!driver) return err_set(e, "no NVIDIA driver (libcuda.so.1 cannot be loaded)"), 0;
    dlclose(driver);
#endif
    if (plugin_open(e) < 0) return 0;
    return api->devices(e);
}

/* The rest are called only after kernels_cuda_devices() found a GPU, so the plugin is open. */
const struct kernels *kernels_cuda(int device) {
    CHECK(api);
    return api->table(device);
}

int kernels_cuda_bf16_native(void) {
    CHECK(api);
    return api->bf16_native();
}

const struct kernels *kernels_cuda_bf16(int device) {
    CHECK(api);
    return api->bf16_table(device);
}

void kernels_cuda_describe(char *buf, size_t size) {
    CHECK(api);
    api->describe(buf, size);
}

int kernels_cuda_make_current(int device) {
    CHECK(api);
    return api->make_current(device);
}
