/* Twin hardware stand-in, loaded into every process of a twin compute node through /etc/ld.so.preload (so also
 * into what slurmd starts with a scrubbed environment, such as its HealthCheckProgram):
 * - the fake node's settings: each KEY=VALUE line of /opt/twin-hw/env is set in the environment unless already set
 *   (NDFLEET_SYSROOT: the fake /proc and /sys tree of tests/fakes/node.py; NDFLEET_FAKE_FAULTS: injected faults);
 * - the memory an ND H100 v5 has: sysconf(_SC_PHYS_PAGES), which slurmd reports as RealMemory, answers from the
 *   fake /proc/meminfo instead of the container host's memory;
 * - the machine's uptime: a VM's kernel boots with the VM, a container shares the host's. slurmd reports sysinfo()'s
 *   uptime as the node's boot time, and slurmctld takes a node it powered up (an elastic island's) as up only once it
 *   registers with a boot time after the power-up request: the container's own start (its PID 1's) stands in. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
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

/* Seconds the host had been up when this machine's PID 1 started (0 when unknown). */
static long host_uptime_at_boot(void) {
    char buf[1024], *p;
    unsigned long long start = 0;
    size_t n;
    FILE *f = fopen("/proc/1/stat", "r");
    if (!f) return 0;
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    /* proc(5): field 22 is starttime in clock ticks after the host booted; field 2 (the command) may hold spaces. */
    p = strrchr(buf, ')');
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
                     &start) != 1)
        return 0;
    return (long)(start / (unsigned long long)sysconf(_SC_CLK_TCK));
}

int sysinfo(struct sysinfo *info) {
    static int (*real_sysinfo)(struct sysinfo *);
    int rc;
    long since;
    if (!real_sysinfo) real_sysinfo = (int (*)(struct sysinfo *))dlsym(RTLD_NEXT, "sysinfo");
    rc = real_sysinfo(info);
    since = rc == 0 ? host_uptime_at_boot() : 0;
    if (since > 0 && info->uptime > since) info->uptime -= since;
    return rc;
}
