"""Set-up steps for the stack's storage: blob containers through BlobFuse2 (managed identity, no keys) and Azure
Managed Lustre. What Azure computes after the plan (storage account, identity client id, Lustre MGS address)
comes from the scale set's tags through the instance metadata service, read once per set-up."""

from __future__ import annotations

import os

from ndfleet_node.net import IMDS_CAP, FetchError, Service
from ndfleet_node.runner import NOT_FOUND
from ndfleet_node.setup import SetupContext, StepFailed
from ndfleet_node.setup.apt import install_package

IMDS_TRIES = 5


def imds_tags(ctx: SetupContext) -> dict[str, str]:
    """The scale set's tags (name -> value); {} when IMDS does not answer after a few tries."""
    if ctx.tags is not None:
        return ctx.tags
    url = str(ctx.config.section("imds").get("tags_url", ""))
    tags: dict[str, str] = {}
    for attempt in range(IMDS_TRIES):
        try:
            reply = Service("imds", url, IMDS_CAP).send("GET", url, {})
            data = reply.json() if reply.status == 200 else None
        except FetchError:
            data = None
        if isinstance(data, list):
            tags = {str(t.get("name")): str(t.get("value", "")) for t in data if isinstance(t, dict)}
            break
        ctx.sleep(attempt + 1)
    ctx.tags = tags
    return tags


def _tag(ctx: SetupContext, key: str) -> str:
    return imds_tags(ctx).get(str(ctx.config.section("imds").get(key, "")), "")


def blobfuse2_config(account: str, container: str, cache_dir: str, client_id: str, suffix: str) -> str:
    lines = [
        "allow-other: true",
        "logging:",
        "  type: syslog",
        "  level: log_warning",
        "components:",
        "  - libfuse",
        "  - file_cache",
        "  - attr_cache",
        "  - azstorage",
        "libfuse:",
        "  attribute-expiration-sec: 120",
        "  entry-expiration-sec: 120",
        "  negative-entry-expiration-sec: 240",
        "file_cache:",
        f"  path: {cache_dir}",
        "  timeout-sec: 120",
        "attr_cache:",
        "  timeout-sec: 7200",
        "azstorage:",
        "  type: block",
        f"  account-name: {account}",
        f"  endpoint: https://{account}.{suffix}",
        f"  container: {container}",
        "  mode: msi",
    ]
    if client_id:
        lines.append(f"  appid: {client_id}")
    return "\n".join(lines) + "\n"


def _mount_blob(ctx: SetupContext, container: str, mnt: str, cfg_path: str) -> str:
    return ctx.retry(
        f"blob container {container} mounted at {mnt}",
        lambda: ctx.run("blobfuse2", "mount", mnt, f"--config-file={cfg_path}"),
        lambda: ctx.mounted(mnt),
    )


def setup_blob(ctx: SetupContext) -> str:
    containers = list(ctx.config.mounts.get("blob", []))
    if not containers:
        return "the stack has no blob containers"
    todo = [c for c in containers if not ctx.mounted(str(c["mountpoint"]))]
    if not todo:
        return f"{len(containers)} blob container(s) already mounted"
    account = _tag(ctx, "tag_storage_account")
    if not account:
        tag = ctx.config.section("imds").get("tag_storage_account")
        raise StepFailed(f"the scale set has no {tag} tag (instance metadata); blob containers not mounted")
    client = _tag(ctx, "tag_identity_client_id")
    done, failed = [], []
    # The Azure HPC image has no BlobFuse2 (Azure/azhpc-images installs none): installed here, only when a container
    # is to be mounted, under the apt lock ndfleet-slurm-setup also takes (setup/apt.py).
    if ctx.run("blobfuse2", "--version").rc == NOT_FOUND:
        done.append(install_package(ctx, "blobfuse2"))
    for c in todo:
        mnt, cfg_path = str(c["mountpoint"]), str(c["config"])
        for d in (mnt, str(c["cache_dir"]), os.path.dirname(cfg_path)):
            os.makedirs(ctx.path(d), exist_ok=True)
        old = os.umask(0o077)
        try:
            with open(ctx.path(cfg_path), "w", encoding="utf-8") as f:
                f.write(blobfuse2_config(account, str(c["container"]), str(c["cache_dir"]), client,
                                         ctx.config.blob_endpoint_suffix))  # fmt: skip
        finally:
            os.umask(old)
        try:
            done.append(_mount_blob(ctx, str(c["container"]), mnt, cfg_path))
        except StepFailed as e:
            failed.append(str(e))
    if failed:
        raise StepFailed("; ".join(failed))
    return "; ".join(done)


def setup_lustre(ctx: SetupContext) -> str:
    lustre = ctx.config.mounts.get("lustre")
    if not lustre:
        return "the stack has no Managed Lustre"
    mnt = str(lustre["mount"])
    if ctx.mounted(mnt):
        return f"{mnt} is already mounted"
    mgs = _tag(ctx, "tag_lustre_mgs")
    if not mgs:
        tag = ctx.config.section("imds").get("tag_lustre_mgs")
        raise StepFailed(f"the scale set has no {tag} tag (instance metadata); Managed Lustre not mounted")
    if ctx.run("mount.lustre", "--help").rc == 127:
        raise StepFailed("the Lustre client (mount.lustre) is not installed on this image")
    os.makedirs(ctx.path(mnt), exist_ok=True)
    source = f"{mgs}@tcp:/{lustre['fs_name']}"
    return ctx.retry(
        f"Managed Lustre {source} mounted at {mnt}",
        lambda: ctx.run("mount", "-t", "lustre", "-o", "noatime,flock", source, mnt),
        lambda: ctx.mounted(mnt),
    )

