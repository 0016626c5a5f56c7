//! More hosts beside the test's own: replicas contending for a Lease, or a
//! host the test kills and replaces.
//!
//! The harness stops its one host (`start_host`) at cleanup and expects a
//! clean exit; a host the test means to kill does not fit that. A replica
//! is the test's to stop: it is killed when dropped (so also when the test
//! fails or panics, before the namespace is deleted), and a test that wants
//! a clean exit checked calls [`HostProcess::stop`] itself.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, ensure};

use super::poll::Probe;
use super::{HostProcess, RealCluster};

impl RealCluster {
    /// Starts one more `reconciler-host run` for the test's namespace with
    /// exactly these plugins, as the pod `name` of a Deployment would run
    /// it: `POD_NAME=name`, which becomes the `reportingInstance` of its
    /// Events and the start of its leader-election identity, so the cluster
    /// itself tells the replicas' writes apart. `args` come after `run`'s
    /// own. Its plugins directory and log are its own, under the test's
    /// temporary directory.
    pub fn start_replica(
        &self,
        name: &str,
        plugins: &[PathBuf],
        args: &[&str],
    ) -> Result<HostProcess> {
        self.start_replica_with_env(name, plugins, args, &[])
    }

    /// [`Self::start_replica`] with these variables added to its
    /// environment (`POD_NAMESPACE`, as the downward API sets it in a pod).
    pub fn start_replica_with_env(
        &self,
        name: &str,
        plugins: &[PathBuf],
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Result<HostProcess> {
        let workdir = self.workdir.path().join("replicas").join(name);
        ensure!(
            !workdir.exists(),
            "the test already started a replica named {name}"
        );
        std::fs::create_dir_all(&workdir)?;
        let host = HostProcess::start_with(
            &self.host_binary,
            &workdir,
            &crate::test_compile_cache_dir(),
            plugins,
            &self.namespace,
            args,
            &[&[("POD_NAME", name)], env].concat(),
        )?;
        self.step(format!(
            "started replica {name}: reconciler-host run (pid {}) {}",
            host.pid(),
            args.join(" ")
        ));
        Ok(host)
    }

    /// Waits until one line of `host`'s log contains every one of
    /// `needles`, and returns it; fails at once if `host` exits.
    pub async fn wait_for_log_of(
        &self,
        host: &HostProcess,
        needles: &[&str],
        timeout: Duration,
    ) -> Result<String> {
        self.wait_for(
            &format!(
                "a line of the log of the host (pid {}) with {needles:?}",
                host.pid()
            ),
            timeout,
            async || {
                if let Some(line) = host.log_lines_with(needles).into_iter().next() {
                    return Ok(Probe::Ready(line));
                }
                host.ensure_running()?;
                Ok(Probe::Pending(format!(
                    "{} lines, none with all of them",
                    host.log_text().lines().count()
                )))
            },
        )
        .await
    }
}
