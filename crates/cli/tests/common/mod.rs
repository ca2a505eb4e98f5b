//! Helpers shared by the integration tests that build namespaces and run
//! processes.
#![allow(dead_code)]

use ixora_io::netns::unique_name;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One heavy test at a time (they share two cores).
static SERIAL: Mutex<()> = Mutex::new(());

pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn root() -> bool {
    ixora_io::netns::need_root()
}

pub fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// A process we started: stopped with SIGTERM (then SIGKILL) by its PID on
/// drop; its standard error goes to a file we can read.
pub struct Proc {
    child: Child,
    log: std::path::PathBuf,
    what: String,
}

impl Proc {
    pub fn spawn(cmd: Command, what: &str) -> Proc {
        Self::spawn_to_log(cmd, what, false)
    }

    /// As `spawn`, standard output too going to the log.
    pub fn spawn_with_stdout(cmd: Command, what: &str) -> Proc {
        Self::spawn_to_log(cmd, what, true)
    }

    fn spawn_to_log(mut cmd: Command, what: &str, stdout: bool) -> Proc {
        let log = std::env::temp_dir().join(unique_name(&format!("ixora-{what}"), false) + ".log");
        let f = std::fs::File::create(&log).expect("log file");
        let out = if stdout {
            Stdio::from(f.try_clone().expect("log file"))
        } else {
            Stdio::null()
        };
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(f)
            .spawn()
            .unwrap_or_else(|e| panic!("start {what}: {e}"));
        Proc {
            child,
            log,
            what: what.to_string(),
        }
    }

    pub fn pid(&self) -> nix::unistd::Pid {
        nix::unistd::Pid::from_raw(self.child.id() as i32)
    }

    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGTERM, wait (bounded), then the log.
    pub fn stop(mut self) -> String {
        self.terminate();
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn terminate(&mut self) {
        if self.running() {
            let _ = nix::sys::signal::kill(self.pid(), nix::sys::signal::Signal::SIGTERM);
            let t = Instant::now();
            while self.running() && t.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(20));
            }
            if self.running() {
                let _ = self.child.kill();
            }
        }
        let _ = self.child.wait();
    }

    /// Wait for it to exit by itself (killed after `limit`): its status.
    pub fn wait_exit(&mut self, limit: Duration) -> std::process::ExitStatus {
        let t = Instant::now();
        while self.running() && t.elapsed() < limit {
            std::thread::sleep(Duration::from_millis(20));
        }
        if self.running() {
            let _ = self.child.kill();
        }
        self.child.wait().expect("wait")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.terminate();
        if std::thread::panicking() {
            eprintln!("--- {} log ---\n{}", self.what, self.log());
        }
        let _ = std::fs::remove_file(&self.log);
    }
}

/// A directory of our own under the temporary directory, removed on drop
/// (also when the test fails).
pub struct Scratch(pub std::path::PathBuf);

impl Scratch {
    pub fn new(what: &str) -> Scratch {
        let d = std::env::temp_dir().join(unique_name(&format!("ixora-{what}"), false));
        std::fs::create_dir_all(&d).expect("scratch directory");
        Scratch(d)
    }

    pub fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
