//! A real Kubernetes API server for the `k8s (real cluster)` tier: k3s in a
//! privileged container, through testcontainers. Untested on machines
//! without a Docker daemon (the project's own machines have none).

use std::any::Any;
use std::path::PathBuf;
use std::time::Duration;

use testcontainers::core::{ExecCommand, IntoContainerPort, WaitFor};
use testcontainers::runners::SyncRunner;
use testcontainers::{GenericImage, ImageExt};

/// Starts k3s; returns the path of a kubeconfig that reaches it, the
/// container (kept alive by the caller) and the directory holding the file.
pub(crate) fn start(
    image: &str,
    tag: &str,
) -> Result<(String, Box<dyn Any + Send>, PathBuf), String> {
    let container = GenericImage::new(image, tag)
        .with_exposed_port(6443.tcp())
        .with_wait_for(WaitFor::message_on_stderr("k3s is up and running"))
        .with_privileged(true)
        .with_cmd([
            "server",
            "--disable=traefik,servicelb,metrics-server,local-storage",
            "--tls-san=127.0.0.1",
        ])
        .with_startup_timeout(Duration::from_secs(180))
        .start()
        .map_err(|e| format!("k3s: {e}"))?;
    let port = container
        .get_host_port_ipv4(6443.tcp())
        .map_err(|e| format!("k3s port: {e}"))?;
    let mut cat = container
        .exec(ExecCommand::new(["cat", "/etc/rancher/k3s/k3s.yaml"]))
        .map_err(|e| format!("k3s kubeconfig: {e}"))?;
    let yaml = cat
        .stdout_to_vec()
        .map_err(|e| format!("k3s kubeconfig: {e}"))?;
    let yaml = String::from_utf8_lossy(&yaml).replace(
        "https://127.0.0.1:6443",
        &format!("https://127.0.0.1:{port}"),
    );
    let dir = std::env::temp_dir().join(format!("leasehold-k3s-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let path = dir.join("kubeconfig.yaml");
    std::fs::write(&path, yaml).map_err(|e| e.to_string())?;
    Ok((path.display().to_string(), Box::new(container), dir))
}
