/* test_streams: when cudaemu runs issued work, in each order CUDAEMU_STREAMS names (cudaemu.h).
 * Every order keeps CUDA's guarantees (a wait on an event, a synchronisation, pageable host
 * memory read at the call and written by its return); lazy and random also show what CUDA does
 * not guarantee (work on another stream not waited for has not run; a queried event not ready
 * yet); eager runs all at issue. With CUDAEMU_DEVICE_MEMORY=guarded, device memory faults when
 * the host touches it, and the fault is named. Ends with "test_streams (ORDER): N passed, M
 * failed". */
#include "cudaemu.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

static int passed, failed;
static void check(bool ok, const char *what) {
    if (ok) passed++;
    else {
        failed++;
        fprintf(stderr, "FAIL: %s\n", what);
    }
}
#define CU(call) ((call) == cudaSuccess ? (void)0 : (fprintf(stderr, "%s failed\n", #call), exit(1)))

static unsigned char first_byte(const void *p) { return *(const unsigned char *)p; }

/* Whether a child process reading dev dies of SIGSEGV after cudaemu's line naming it. */
static bool host_touch_dies(const void *dev) {
    int fd[2];
    if (pipe(fd) != 0) return false;
    fflush(stdout), fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        volatile unsigned char v = *(const volatile unsigned char *)dev;
        (void)v;
        _exit(0);
    }
    close(fd[1]);
    char buf[512] = {0};
    size_t got = 0;
    for (ssize_t n; got < sizeof buf - 1 && (n = read(fd[0], buf + got, sizeof buf - 1 - got)) > 0;) got += n;
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV &&
           strstr(buf, "cudaemu: the host touched device memory at") != nullptr;
}

int main() {
    const char *env = getenv("CUDAEMU_STREAMS");
    std::string order = env && *env ? env : "lazy";
    bool lazy = order == "lazy", random = order.rfind("random", 0) == 0;
    const char *memory = getenv("CUDAEMU_DEVICE_MEMORY");
    bool guarded = memory && !strcmp(memory, "guarded");
    enum { BYTES = 4096 };
    void *dev, *pinned;
    cudaStream_t s1, s2;
    cudaEvent_t e;
    CU(cudaMalloc(&dev, BYTES));
    CU(cudaMallocHost(&pinned, BYTES));
    CU(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CU(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CU(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    std::vector<unsigned char> pageable(BYTES);

    /* A copy on s2 after a wait for s1's work sees that work, whatever the order. */
    bool seen = true;
    for (int i = 0; i < 50; i++) {
        CU(cudaMemsetAsync(dev, i, BYTES, s1));
        CU(cudaEventRecord(e, s1));
        CU(cudaStreamWaitEvent(s2, e, 0));
        CU(cudaMemcpyAsync(pinned, dev, BYTES, cudaMemcpyDeviceToHost, s2));
        CU(cudaStreamSynchronize(s2));
        seen = seen && first_byte(pinned) == i;
    }
    check(seen, "a copy after a wait for an event did not see the work before the event");

    /* Without the wait: lazy leaves s1's work queued (the copy reads the old bytes), eager has
     * run it. */
    CU(cudaMemsetAsync(dev, 7, BYTES, s1));
    CU(cudaMemcpyAsync(pinned, dev, BYTES, cudaMemcpyDeviceToHost, s2));
    CU(cudaStreamSynchronize(s2));
    if (lazy) check(first_byte(pinned) == 49, "lazy: a copy on s2 saw s1's work it never waited for");
    if (order == "eager") check(first_byte(pinned) == 7, "eager: work did not run when issued");
    CU(cudaStreamSynchronize(s1));

    /* An event polled: lazy says not ready once, then ready; every order ends ready. */
    CU(cudaMemsetAsync(dev, 9, BYTES, s1));
    CU(cudaEventRecord(e, s1));
    cudaError_t first = cudaEventQuery(e);
    int polls = 1;
    while (cudaEventQuery(e) == cudaErrorNotReady && polls < 10) polls++;
    if (lazy) check(first == cudaErrorNotReady, "lazy: a queried event was ready before anything ran it");
    check(cudaEventQuery(e) == cudaSuccess, "a polled event never became ready");
    CU(cudaMemcpyAsync(pinned, dev, BYTES, cudaMemcpyDeviceToHost, s1));
    CU(cudaEventSynchronize(e));
    CU(cudaStreamSynchronize(s1));
    check(first_byte(pinned) == 9, "the work before a ready event had not run");

    /* Pageable memory: read by the call (a later write does not reach the device), written
     * by its return (no synchronisation needed). */
    memset(pageable.data(), 3, BYTES);
    CU(cudaMemcpyAsync(dev, pageable.data(), BYTES, cudaMemcpyHostToDevice, s1));
    memset(pageable.data(), 4, BYTES);
    CU(cudaMemcpyAsync(pageable.data(), dev, BYTES, cudaMemcpyDeviceToHost, s1));
    check(pageable[0] == 3 && pageable[BYTES - 1] == 3, "a copy from pageable memory read it after the call");

    /* Page-locked memory is read when the copy runs: lazily, after the host's next write. */
    memset(pinned, 5, BYTES);
    CU(cudaMemcpyAsync(dev, pinned, BYTES, cudaMemcpyHostToDevice, s1));
    memset(pinned, 6, BYTES);
    CU(cudaMemcpyAsync(pageable.data(), dev, BYTES, cudaMemcpyDeviceToHost, s1));
    if (lazy) check(pageable[0] == 6, "lazy: a copy from page-locked memory ran before it was needed");
    if (order == "eager")
        check(pageable[0] == 5, "eager: a copy from page-locked memory did not run at issue");

    /* random: work on s1 issued before work on s2 sometimes runs after it (s2 synchronised
     * first), sometimes before; lazy: always after. */
    int s1_first = 0, s2_first = 0;
    for (int i = 0; i < 200; i++) {
        std::vector<int> ran;
        cudaemu::issue(s1, [&ran]() { ran.push_back(1); });
        cudaemu::issue(s2, [&ran]() { ran.push_back(2); });
        CU(cudaStreamSynchronize(s2));
        CU(cudaStreamSynchronize(s1));
        (ran.size() == 2 && ran[0] == 1 ? s1_first : s2_first)++;
    }
    if (random) check(s1_first > 0 && s2_first > 0, "random: two streams' work ran in one order only");
    if (lazy) check(s1_first == 0, "lazy: work ran before anything needed it");
    if (order == "eager") check(s2_first == 0, "eager: work did not run in issue order");

    /* A stream's work runs by its destruction; cudaFree waits for the device. */
    void *dev2;
    CU(cudaMalloc(&dev2, BYTES));
    CU(cudaMemsetAsync(dev, 8, BYTES, s2));
    CU(cudaMemcpyAsync(pinned, dev, BYTES, cudaMemcpyDeviceToHost, s2));
    CU(cudaStreamDestroy(s2));
    check(first_byte(pinned) == 8, "a destroyed stream's work never ran");
    CU(cudaMemsetAsync(dev2, 2, BYTES, s1));
    CU(cudaMemcpyAsync(pinned, dev2, BYTES, cudaMemcpyDeviceToHost, s1));
    CU(cudaFree(dev));
    check(first_byte(pinned) == 2, "cudaFree did not wait for the device");
    CU(cudaFree(dev2));

    /* Device memory is the device's: work reaches it; guarded, the host faults on it, and the
     * fault is named (never under ASan, whose exact heap blocks the host can reach). */
    CU(cudaMalloc(&dev, BYTES));
    cudaemu::issue(s1, [dev]() { ((unsigned char *)dev)[1] = 42; });
    CU(cudaMemcpyAsync(pageable.data(), dev, BYTES, cudaMemcpyDeviceToHost, s1));
    check(pageable[1] == 42, "work issued on a stream did not reach device memory");
#ifndef __SANITIZE_ADDRESS__
    if (guarded) check(host_touch_dies(dev), "guarded: the host read device memory without a fault named");
#endif
    CU(cudaFree(dev));

    CU(cudaEventDestroy(e));
    CU(cudaStreamDestroy(s1));
    CU(cudaFreeHost(pinned));
    printf("test_streams (%s%s): %d passed, %d failed\n", order.c_str(), guarded ? ", guarded" : "", passed,
           failed);
    return failed != 0;
}
