"""Makes a runc bundle, unpacked by `umoci unpack`, run the host as a pod would.

    umoci unpack --image target/image/oci:dev BUNDLE
    python3 scripts/image_bundle.py BUNDLE --api-port PORT --service-account DIR \
        --plugins DIR --cache DIR [-- HOST ARGS...]
    runc run -d --bundle BUNDLE NAME

What it sets, as deploy/deployment.yaml asks of a kubelet: a read-only root
filesystem, every capability dropped, no new privileges, the image's user
(65532); the service account's token, CA and namespace at the path kube's
in-cluster configuration reads, with KUBERNETES_SERVICE_HOST/PORT naming a
loopback API server; the plugins directory read-only and the compile cache
writable. Host networking stands in for the pod network (no kubelet here).
Without HOST ARGS the host serves /plugins with its probes on
127.0.0.1:18080.
"""

import argparse
import json
import os
import sys

SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("bundle")
    parser.add_argument("--api-port", required=True, help="the API server's port on 127.0.0.1")
    parser.add_argument(
        "--service-account", required=True, help="a directory with token, ca.crt and namespace"
    )
    parser.add_argument("--plugins", required=True)
    parser.add_argument("--cache", required=True, help="writable by uid 65532")
    argv = sys.argv[1:]
    host_args = []
    if "--" in argv:
        at = argv.index("--")
        argv, host_args = argv[:at], argv[at + 1 :]
    options = parser.parse_args(argv)

    path = os.path.join(options.bundle, "config.json")
    with open(path) as f:
        config = json.load(f)
    process = config["process"]
    process["terminal"] = False
    process["noNewPrivileges"] = True
    # This machine's root may not raise it; a kubelet leaves it alone too.
    process.pop("oomScoreAdj", None)
    process["capabilities"] = {
        k: [] for k in ["bounding", "effective", "inheritable", "permitted", "ambient"]
    }
    args = host_args or [
        "run", "--plugins-dir", "/plugins", "--http-listen", "127.0.0.1:18080",
        "--compile-cache", "/cache",
    ]
    process["args"] = ["/usr/local/bin/reconciler-host"] + args
    namespace = open(os.path.join(options.service_account, "namespace")).read().strip()
    process["env"] = [e for e in process.get("env", []) if not e.startswith("KUBERNETES_")] + [
        "KUBERNETES_SERVICE_HOST=127.0.0.1",
        f"KUBERNETES_SERVICE_PORT={options.api_port}",
        f"POD_NAMESPACE={namespace}",
    ]
    config["root"]["readonly"] = True
    config["linux"]["namespaces"] = [
        n for n in config["linux"]["namespaces"] if n["type"] != "network"
    ]
    mount = lambda destination, source, mode: {
        "destination": destination,
        "type": "bind",
        "source": os.path.abspath(source),
        "options": ["rbind", mode],
    }
    config["mounts"] += [
        mount(SERVICE_ACCOUNT, options.service_account, "ro"),
        mount("/plugins", options.plugins, "ro"),
        mount("/cache", options.cache, "rw"),
    ]
    with open(path, "w") as f:
        json.dump(config, f, indent=1)


if __name__ == "__main__":
    main()
