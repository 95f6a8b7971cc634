"""/proc files: meminfo, cpuinfo, mounts, modules."""

from __future__ import annotations

from ndfleet_node.parsers import fail, to_int


def mem_total_gib(text: str) -> int:
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            kb = to_int(line.split()[1]) if len(line.split()) > 1 else None
            if kb is not None:
                return kb // (1024 * 1024)
    raise fail("/proc/meminfo", text, "no MemTotal")


def cpu_count(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.split(":")[0].strip() == "processor")


def mount_points(text: str) -> set[str]:
    points = set()
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 2:
            # /proc/mounts escapes spaces as \040
            points.add(fields[1].replace("\\040", " "))
    return points


def loaded_modules(text: str) -> set[str]:
    return {line.split()[0] for line in text.splitlines() if line.split()}
