/* The cost of the trace clock on this machine: clock_gettime(CLOCK_MONOTONIC)
 * against rdtsc, and the kernel's clocksource (a non-TSC clocksource can make
 * clock_gettime a system call). Build: cc -O2 -o clock_cost clock_cost.c */
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <x86intrin.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(void) {
    char src[64] = "?";
    FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
    if (f) {
        if (fscanf(f, "%63s", src) != 1) src[0] = '?';
        fclose(f);
    }
    enum { N = 2000000 };
    volatile uint64_t sink = 0;
    double t0 = now();
    for (int i = 0; i < N; i++) sink += (uint64_t)now();
    double gettime = (now() - t0) / N;
    t0 = now();
    for (int i = 0; i < N; i++) sink += __rdtsc();
    double tsc = (now() - t0) / N;
    printf("RESULT clocksource=%s clock_gettime_ns=%.1f rdtsc_ns=%.1f\n", src, gettime, tsc);
    return 0;
}
