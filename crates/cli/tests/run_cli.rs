//! `ixora run` says when its preload library cannot reach a program's
//! sockets (a statically linked program, a Go program), or not all its
//! socket I/O (a program that links liburing), and runs it anyway; a
//! dynamically linked C program gets no such warning. No service is
//! needed: the program runs on the kernel stack either way.

mod common;

use common::Scratch;
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
    // (Removed however the test ends.)
    let scratch = Scratch::new("run-cli");
    let dir = scratch.path().to_path_buf();
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
        // A program linking liburing (a stand-in of that name here:
        // only the name its image needs matters).
        let lib = dir.join("liburing.so.2");
        let uring = dir.join("uring");
        std::fs::write(dir.join("l.c"), "int ixora_stand_in(void) { return 0; }\n").unwrap();
        std::fs::write(
            dir.join("u.c"),
            "int ixora_stand_in(void);\nint main(void) { return ixora_stand_in(); }\n",
        )
        .unwrap();
        if tool(
            Command::new("cc")
                .args(["-shared", "-fPIC", "-Wl,-soname,liburing.so.2", "-o"])
                .arg(&lib)
                .arg(dir.join("l.c")),
            "cc -shared",
        ) && tool(
            Command::new("cc")
                .arg("-o")
                .arg(&uring)
                .arg(dir.join("u.c"))
                .arg(&lib),
            "cc (linking the stand-in)",
        ) {
            let out = Command::new(BIN)
                .args(["run", "--socket", "/nonexistent/ixora.sock", "--"])
                .arg(&uring)
                .env("LD_LIBRARY_PATH", &dir)
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(0), "{err}");
            assert!(err.contains("links liburing"), "{err}");
            let (_, err) = run(&dynamic);
            assert!(!err.contains("liburing"), "{err}");
        }
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
}
