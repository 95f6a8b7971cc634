/* Twin hardware stand-in, loaded into every process of a twin compute node through /etc/ld.so.preload (so also
 * into what slurmd starts with a scrubbed environment, such as its HealthCheckProgram):
 * - the fake node's settings: each KEY=VALUE line of /opt/twin-hw/env is set in the environment unless already set
 *   (NDFLEET_SYSROOT: the fake /proc and /sys tree of tests/fakes/node.py; NDFLEET_FAKE_FAULTS: injected faults);
 * - the memory an ND H100 v5 has: sysconf(_SC_PHYS_PAGES), which slurmd reports as RealMemory, answers from the
 *   fake /proc/meminfo instead of the container host's memory;
 * - the machine's uptime: a VM's kernel boots with the VM, a container shares the host's. slurmd reports sysinfo()'s
 *   uptime as the node's boot time, and slurmctld takes a node it powered up (an elastic island's) as up only once it
 *   registers with a boot time after the power-up request: the container's own start (its PID 1's) stands in;
 * - the VM's processors: /opt/twin-hw/env sets HWLOC_SYNTHETIC to the size's shape (tests/twin/twin.py hwloc_shape),
 *   so slurmd counts the VM's 96 CPUs through hwloc, and Slurm binds tasks and constrains jobs to CPU numbers up to
 *   95. A VM's kernel has those CPUs; the container's has the host's few. Where the kernel checks CPU numbers (a
 *   task's affinity: sched_setaffinity, which task/affinity calls, SchedMD src/plugins/task/affinity/affinity.c; a
 *   cgroup's cpuset.cpus, which task/cgroup writes with open() and write(), src/plugins/cgroup/common/
 *   cgroup_common.c common_file_write_content) each VM CPU n is folded onto host CPU n mod (host CPUs), as a
 *   hypervisor runs many vCPUs on fewer cores. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sched.h>
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

/* --- the VM's CPUs folded onto the host's ------------------------------------------------------------------------ */
#define MAX_CPUS 4096

static int host_cpus(void) {
    int n = get_nprocs();
    return n > 0 ? n : 1;
}

int sched_setaffinity(pid_t pid, size_t size, const cpu_set_t *mask) {
    static int (*real_setaffinity)(pid_t, size_t, const cpu_set_t *);
    cpu_set_t folded;
    size_t i, bits = size * 8 < CPU_SETSIZE ? size * 8 : CPU_SETSIZE;
    int n = host_cpus();
    if (!real_setaffinity)
        real_setaffinity = (int (*)(pid_t, size_t, const cpu_set_t *))dlsym(RTLD_NEXT, "sched_setaffinity");
    CPU_ZERO(&folded);
    for (i = 0; i < bits; i++)
        if (CPU_ISSET_S(i, size, mask)) CPU_SET(i % n, &folded);
    return real_setaffinity(pid, sizeof folded, &folded);
}

/* A CPU list ("0-3,8,10-11\n") folded onto the host's CPUs; 0 when the text is not one. */
static size_t fold_cpu_list(const char *in, size_t len, char *out, size_t out_size) {
    unsigned char cpus[MAX_CPUS]; /* on the stack: slurmstepd writes from several threads */
    char text[4096], *tok, *save = NULL;
    size_t used = 0;
    int i, n = host_cpus();
    if (len == 0 || len >= sizeof text) return 0;
    for (i = 0; i < (int)len; i++)
        if (!strchr("0123456789,-\n", in[i])) return 0;
    memcpy(text, in, len);
    text[len] = 0;
    memset(cpus, 0, sizeof cpus);
    for (tok = strtok_r(text, ",\n", &save); tok; tok = strtok_r(NULL, ",\n", &save)) {
        int lo, hi;
        if (sscanf(tok, "%d-%d", &lo, &hi) != 2) hi = lo = atoi(tok);
        if (lo < 0 || hi >= MAX_CPUS || lo > hi) return 0;
        for (i = lo; i <= hi; i++) cpus[i % n] = 1;
    }
    out[0] = 0;
    for (i = 0; i < n && i < MAX_CPUS; i++)
        if (cpus[i]) used += (size_t)snprintf(out + used, out_size - used, used ? ",%d" : "%d", i);
    if (used == 0 || used >= out_size - 1) return 0;
    out[used++] = '\n';
    return used;
}

static int is_cpuset_cpus(int fd) {
    char link[64], path[4096];
    ssize_t n;
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    n = readlink(link, path, sizeof path - 1);
    if (n <= 0) return 0;
    path[n] = 0;
    return n >= 12 && strcmp(path + n - 12, "/cpuset.cpus") == 0;
}

ssize_t write(int fd, const void *buf, size_t count) {
    static ssize_t (*real_write)(int, const void *, size_t);
    char folded[4096];
    size_t len;
    if (!real_write) real_write = (ssize_t (*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    /* Only a short text of digits, commas and dashes is looked at, and only one written to a cpuset.cpus file. */
    if (count > 0 && count < 4096 && strchr("0123456789", ((const char *)buf)[0]) && is_cpuset_cpus(fd)) {
        len = fold_cpu_list(buf, count, folded, sizeof folded);
        if (len) {
            ssize_t rc = real_write(fd, folded, len);
            return rc < 0 ? rc : (ssize_t)count;
        }
    }
    return real_write(fd, buf, count);
}
