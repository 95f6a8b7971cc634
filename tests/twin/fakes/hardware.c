/* Twin hardware stand-in, loaded into every process of a twin compute node through /etc/ld.so.preload (so also
 * into what slurmd starts with a scrubbed environment, such as its HealthCheckProgram):
 * - the fake node's settings: each KEY=VALUE line of /opt/twin-hw/env is set in the environment unless already set
 *   (NDFLEET_SYSROOT: the fake /proc and /sys tree of tests/fakes/node.py; NDFLEET_FAKE_FAULTS: injected faults);
 * - the memory an ND H100 v5 has: sysconf(_SC_PHYS_PAGES), which slurmd reports as RealMemory, answers from the
 *   fake /proc/meminfo instead of the container host's memory. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__attribute__((constructor)) static void load_env(void) {
    char line[4096];
    FILE *f = fopen("/opt/twin-hw/env", "r");
    if (!f) return;
    while (fgets(line, sizeof line, f)) {
        char *eq = strchr(line, '=');
        if (!eq) continue;
        line[strcspn(line, "\n")] = 0;
        *eq = 0;
        setenv(line, eq + 1, 0);
    }
    fclose(f);
}

static long fake_pages(void) {
    const char *sysroot = getenv("NDFLEET_SYSROOT");
    char path[4096], line[256];
    long kb = -1;
    FILE *f;
    snprintf(path, sizeof path, "%s/proc/meminfo", sysroot ? sysroot : "");
    f = fopen(path, "r");
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemTotal: %ld kB", &kb) == 1) break;
    fclose(f);
    return kb > 0 ? kb / (getpagesize() / 1024) : -1;
}

long sysconf(int name) {
    static long (*real_sysconf)(int);
    if (!real_sysconf) real_sysconf = (long (*)(int))dlsym(RTLD_NEXT, "sysconf");
    if (name == _SC_PHYS_PAGES) {
        long pages = fake_pages();
        if (pages > 0) return pages;
    }
    return real_sysconf(name);
}
