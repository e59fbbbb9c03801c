//! `ipc://`: Unix domain sockets. A stale socket file (nobody listening) is replaced on bind; a live one
//! is an address-in-use error. The file is removed when the listener goes away.

use std::io;
use std::path::{Path, PathBuf};

use tokio::net::{UnixListener, UnixStream};

pub(crate) struct IpcListener {
    listener: UnixListener,
    path: PathBuf,
}

impl IpcListener {
    pub fn bind(path: &Path) -> io::Result<(IpcListener, String)> {
        let path = if path.as_os_str() == "*" {
            std::env::temp_dir().join(format!("zmtp-{:016x}.ipc", rand::random::<u64>()))
        } else {
            path.to_path_buf()
        };
        if path.exists() {
            match std::os::unix::net::UnixStream::connect(&path) {
                Ok(_) => {
                    return Err(io::Error::new(io::ErrorKind::AddrInUse, format!("{} is in use", path.display())));
                }
                Err(_) => {
                    tracing::debug!(path = %path.display(), "removing stale ipc socket file");
                    // A listener shutting down may remove it first: that is fine.
                    match std::fs::remove_file(&path) {
                        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                        _ => {}
                    }
                }
            }
        }
        let listener = UnixListener::bind(&path)?;
        let name = format!("ipc://{}", path.display());
        Ok((IpcListener { listener, path }, name))
    }

    pub async fn accept(&self) -> io::Result<UnixStream> {
        Ok(self.listener.accept().await?.0)
    }
}

impl Drop for IpcListener {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
