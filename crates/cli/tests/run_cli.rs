//! `ixora run` says when its preload library cannot reach a program's
//! sockets (a statically linked program, a Go program), and runs it
//! anyway; a dynamically linked C program gets no such warning. No
//! service is needed: the program runs on the kernel stack either way.

use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_ixora");

/// `ixora run` of `prog` (with no service): exit status and standard error.
fn run(prog: &Path) -> (i32, String) {
    let out = Command::new(BIN)
        .args(["run", "--socket", "/nonexistent/ixora.sock", "--"])
        .arg(prog)
        .output()
        .expect("ixora run");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn tool(cmd: &mut Command, what: &str) -> bool {
    match cmd.status() {
        Ok(s) if s.success() => true,
        _ => ixora_io::netns::skip(&format!("{what} failed (is build-essential installed?)")),
    }
}

#[test]
fn run_names_the_programs_its_preload_cannot_reach() {
    let dir = std::env::temp_dir().join(format!("ixora-run-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("p.c");
    std::fs::write(&src, "int main(void) { return 0; }\n").unwrap();
    let (dynamic, stat, go) = (dir.join("dynamic"), dir.join("static"), dir.join("go"));
    let built = tool(Command::new("cc").arg("-o").arg(&dynamic).arg(&src), "cc")
        && tool(
            Command::new("cc")
                .args(["-static", "-o"])
                .arg(&stat)
                .arg(&src),
            "cc -static",
        )
        && tool(
            // A Go program is known by its build-information section.
            Command::new("objcopy")
                .args(["--add-section", ".go.buildinfo=/dev/null"])
                .arg(&dynamic)
                .arg(&go),
            "objcopy",
        );
    if built {
        let (code, err) = run(&dynamic);
        assert_eq!(code, 0, "{err}");
        assert!(
            !err.contains("statically") && !err.contains("Go program"),
            "{err}"
        );
        let (code, err) = run(&stat);
        assert_eq!(code, 0, "{err}");
        assert!(err.contains("is statically linked"), "{err}");
        assert!(err.contains("Running it anyway"), "{err}");
        let (code, err) = run(&go);
        assert_eq!(code, 0, "{err}");
        assert!(err.contains("is a Go program"), "{err}");
        // Found on PATH too, as exec finds it.
        let out = Command::new(BIN)
            .args(["run", "--socket", "/nonexistent/ixora.sock", "--", "static"])
            .env("PATH", &dir)
            .output()
            .unwrap();
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("static is statically linked"),
            "{out:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
