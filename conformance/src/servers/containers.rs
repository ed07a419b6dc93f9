//! Servers in containers, through testcontainers, when a Docker daemon
//! answers.

use std::net::TcpStream;
use std::time::Duration;

use super::kinds::ServerKind;
use super::server::Server;
#[cfg(feature = "testcontainers")]
use super::{
    kinds::{Container, Kind, Ready},
    processes::Guard,
    server::Origin,
};

/// Probes for a Docker daemon without waiting on it.
pub(super) fn docker_probe() -> Result<(), String> {
    let target = std::env::var("DOCKER_HOST").ok();
    let answered = match target.as_deref() {
        Some(host) if host.starts_with("tcp://") => {
            let addr = host.trim_start_matches("tcp://");
            std::net::ToSocketAddrs::to_socket_addrs(addr)
                .ok()
                .and_then(|mut a| a.next())
                .is_some_and(|a| TcpStream::connect_timeout(&a, Duration::from_millis(300)).is_ok())
        }
        Some(host) => unix_socket_answers(host.trim_start_matches("unix://")),
        None => unix_socket_answers("/var/run/docker.sock"),
    };
    if !answered {
        return Err(format!(
            "no Docker daemon answers ({})",
            target.map_or_else(
                || "/var/run/docker.sock".to_owned(),
                |t| format!("DOCKER_HOST={t}")
            )
        ));
    }
    if cfg!(feature = "testcontainers") {
        Ok(())
    } else {
        Err("a Docker daemon answers, but leasehold-conformance was built without the `testcontainers` feature".into())
    }
}

#[cfg(unix)]
fn unix_socket_answers(path: &str) -> bool {
    std::os::unix::net::UnixStream::connect(path).is_ok()
}

#[cfg(not(unix))]
fn unix_socket_answers(_path: &str) -> bool {
    false
}

#[cfg(not(feature = "testcontainers"))]
pub(super) fn start_container(kind: ServerKind) -> Result<Server, String> {
    let row = kind.row();
    Err(format!(
        "{}:{}: built without the `testcontainers` feature",
        row.image, row.tag
    ))
}

#[cfg(feature = "testcontainers")]
pub(super) fn start_container(kind: ServerKind) -> Result<Server, String> {
    use testcontainers::core::{IntoContainerPort, WaitFor};
    use testcontainers::runners::SyncRunner;
    use testcontainers::{GenericImage, ImageExt};

    let Kind {
        image, tag, launch, ..
    } = *kind.row();
    let (port, ready, env) = match launch.container {
        Container::K3s => {
            return crate::k3s::start(image, tag).map(|(url, container, dir)| Server {
                kind,
                url,
                version: tag.to_owned(),
                origin: Origin::Container(format!("{image}:{tag}")),
                settings: None,
                guard: Some(Guard {
                    child: None,
                    stop: None,
                    lock_files: Vec::new(),
                    dir,
                    relaunch: None,
                    _container: Some(std::sync::Mutex::new(container)),
                }),
            });
        }
        Container::Generic { port, ready, env } => (port, ready, env),
    };
    let wait = match ready {
        Ready::Stdout(line) => WaitFor::message_on_stdout(line),
        Ready::Stderr(line) => WaitFor::message_on_stderr(line),
    };
    let mut req = GenericImage::new(image, tag)
        .with_exposed_port(port.tcp())
        .with_wait_for(wait)
        .with_startup_timeout(Duration::from_secs(120));
    for (k, v) in env {
        req = req.with_env_var(*k, *v);
    }
    let container = req.start().map_err(|e| e.to_string())?;
    let host_port = container
        .get_host_port_ipv4(port.tcp())
        .map_err(|e| e.to_string())?;
    Ok(Server {
        kind,
        url: launch.url_at(host_port),
        version: tag.to_owned(),
        origin: Origin::Container(format!("{image}:{tag}")),
        settings: None,
        guard: Some(Guard {
            child: None,
            stop: None,
            lock_files: Vec::new(),
            dir: std::env::temp_dir().join("leasehold-none"),
            relaunch: None,
            _container: Some(std::sync::Mutex::new(Box::new(container))),
        }),
    })
}
