//! Which programs the preload shim reaches, read from their ELF images:
//! `ixora run` says so before it starts a program, and the shim before
//! an `exec` hands Ixora sockets to one it cannot reach.

/// How much of a program's socket I/O the preload library can serve.
#[derive(Debug, PartialEq, Eq)]
pub enum Reach {
    /// All of it (as far as its image tells).
    All,
    /// None of it, and why.
    Nothing(&'static str),
    /// All but what it does in a way that bypasses the C library (which
    /// the message names).
    Partly(&'static str),
}

/// How far the preload library reaches the program in `file` (an ELF
/// image): a statically linked program never runs the dynamic loader, so
/// `LD_PRELOAD` is not loaded into it; a Go program makes its socket
/// system calls itself, not through the C library; a program that links
/// liburing may submit socket I/O to an io_uring, which the kernel
/// carries out on the socket's kernel placeholder. Anything else (a
/// script, a dynamic C program, an unreadable or unknown file) is assumed
/// to be reachable.
pub fn preload_reach<'d, R: object::ReadRef<'d>>(file: R) -> Reach {
    use object::read::elf::{ElfFile64, ProgramHeader};
    use object::{Endianness, Object, ObjectSection};
    let Ok(elf) = ElfFile64::<Endianness, R>::parse(file) else {
        return Reach::All;
    };
    let endian = elf.endian();
    let dynamic = elf
        .elf_program_headers()
        .iter()
        .any(|p| p.p_type(endian) == object::elf::PT_INTERP);
    if !dynamic {
        return Reach::Nothing(
            "is statically linked: the dynamic loader never runs, so Ixora's preload library \
             is not loaded into it",
        );
    }
    if elf.section_by_name(".go.buildinfo").is_some() {
        return Reach::Nothing(
            "is a Go program: Go makes its socket system calls itself, not through the C \
             library, so Ixora's preload library never sees them",
        );
    }
    // (The libraries it needs are named in its dynamic string table.)
    let needs_uring = elf
        .section_by_name(".dynstr")
        .and_then(|s| s.data().ok())
        .is_some_and(|d| d.windows(11).any(|w| w == b"liburing.so"));
    if needs_uring {
        return Reach::Partly(
            "links liburing: a receive or send it submits to an io_uring is carried out by \
             the kernel on the socket's kernel placeholder, not by Ixora, and fails there \
             (a send EPIPE, a receive ENOTCONN); its calls through the C library are served",
        );
    }
    Reach::All
}

/// [`preload_reach`] of an open file, read in the few places its headers
/// name (not whole).
pub fn reach_of(file: std::fs::File) -> Reach {
    preload_reach(&object::ReadCache::new(file))
}
