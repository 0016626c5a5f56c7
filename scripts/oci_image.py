"""Packs a root filesystem into a reproducible, single-layer OCI image.

Used by scripts/build-image; the standard library only, so a fresh machine
needs nothing but python3. Reproducible by construction: entries sorted by
path, every owner 0:0, modes normalised (0755 for directories and
executables, 0644 for the rest), every time the given epoch, and JSON
written with sorted keys and no spaces, so the same files give the same
digests.
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import stat
import tarfile
import time

ENTRYPOINT = ["/usr/local/bin/reconciler-host"]
CMD = ["run", "--plugins-dir", "/plugins", "--http-listen", "0.0.0.0:8080"]
USER = "65532:65532"


def canonical(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def tar_bytes(entries):
    """A tar of (TarInfo, bytes or None) in the order given, as bytes."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for info, data in entries:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def info_for(name, kind, mode, size, epoch):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.size = size
    info.mtime = epoch
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def rootfs_entries(root, epoch):
    """Every directory and file under root, sorted, with normalised metadata."""
    paths = []
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            paths.append(os.path.join(directory, name))
    entries = []
    for path in sorted(paths, key=lambda p: os.path.relpath(p, root)):
        name = os.path.relpath(path, root)
        st = os.lstat(path)
        if stat.S_ISDIR(st.st_mode):
            entries.append((info_for(name, tarfile.DIRTYPE, 0o755, 0, epoch), None))
        elif stat.S_ISREG(st.st_mode):
            with open(path, "rb") as f:
                data = f.read()
            mode = 0o755 if st.st_mode & 0o111 else 0o644
            entries.append((info_for(name, tarfile.REGTYPE, mode, len(data), epoch), data))
        else:
            raise SystemExit(f"oci_image.py: {path} is neither a file nor a directory")
    return entries


def gzipped(data):
    buffer = io.BytesIO()
    # No file name and a fixed time in the header: the same bytes each run.
    with gzip.GzipFile(fileobj=buffer, mode="wb", filename="", mtime=0, compresslevel=6) as gz:
        gz.write(data)
    return buffer.getvalue()


def write_blob(out, data):
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    path = os.path.join(out, "blobs", "sha256", digest.split(":")[1])
    with open(path, "wb") as f:
        f.write(data)
    return digest


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rootfs", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--tag", required=True)
    parser.add_argument("--epoch", type=int, required=True)
    parser.add_argument("--revision", required=True)
    args = parser.parse_args()

    layout = os.path.join(args.out, "oci")
    os.makedirs(os.path.join(layout, "blobs", "sha256"))
    layer_tar = tar_bytes(rootfs_entries(args.rootfs, args.epoch))
    layer = gzipped(layer_tar)
    layer_digest = write_blob(layout, layer)
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(args.epoch))
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": created,
        "config": {
            "User": USER,
            "Entrypoint": ENTRYPOINT,
            "Cmd": CMD,
            "Env": ["PATH=/usr/local/bin:/usr/bin:/bin"],
            "WorkingDir": "/",
            "Labels": {"org.opencontainers.image.revision": args.revision},
        },
        "rootfs": {
            "type": "layers",
            "diff_ids": ["sha256:" + hashlib.sha256(layer_tar).hexdigest()],
        },
    }
    config_bytes = canonical(config)
    config_digest = write_blob(layout, config_bytes)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": len(config_bytes),
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": layer_digest,
                "size": len(layer),
            }
        ],
        "annotations": {
            "org.opencontainers.image.revision": args.revision,
            "org.opencontainers.image.created": created,
        },
    }
    manifest_bytes = canonical(manifest)
    manifest_digest = write_blob(layout, manifest_bytes)
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": manifest_digest,
                "size": len(manifest_bytes),
                "annotations": {"org.opencontainers.image.ref.name": args.tag.split(":")[-1]},
            }
        ],
    }
    with open(os.path.join(layout, "index.json"), "wb") as f:
        f.write(canonical(index))
    with open(os.path.join(layout, "oci-layout"), "wb") as f:
        f.write(canonical({"imageLayoutVersion": "1.0.0"}))

    # The layout as one tarball, as reproducible as its contents.
    archive = rootfs_entries(layout, args.epoch)
    with open(os.path.join(args.out, "reconciler-host.oci.tar"), "wb") as f:
        f.write(tar_bytes(archive))
    with open(os.path.join(args.out, "digest"), "w") as f:
        f.write(manifest_digest + "\n")
    print(f"image {args.tag} {manifest_digest}")
    print(f"  layer {len(layer)} bytes compressed, {len(layer_tar)} bytes unpacked")
    print(f"  {args.out}/oci (OCI layout), {args.out}/reconciler-host.oci.tar")


if __name__ == "__main__":
    main()
