//! The BPF side of the AF_XDP backend, through raw `bpf(2)`: an XSKMAP
//! (receive queue index -> AF_XDP socket), a 31-instruction XDP program
//! that redirects each frame to the socket of the queue it arrived on (and
//! passes it to the kernel stack when that queue has none) after giving an
//! IPv4 UDP frame its receive time as metadata, and a BPF link that
//! attaches the program to the interface.
//!
//! The link is what makes detaching automatic: an XDP program attached
//! through `BPF_LINK_CREATE` stays attached exactly as long as the link file
//! descriptor (or a pin of it) exists, so closing it — on drop, or when the
//! process exits or is killed — removes the program. (The older netlink
//! attach leaves the program on the interface until someone removes it.)
#![allow(unsafe_code)]

use std::ffi::c_int;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

// bpf(2) commands (enum bpf_cmd).
const BPF_MAP_CREATE: c_int = 0;
const BPF_MAP_UPDATE_ELEM: c_int = 2;
const BPF_PROG_LOAD: c_int = 5;
const BPF_LINK_CREATE: c_int = 28;
const BPF_LINK_DETACH: c_int = 34;

const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
/// enum bpf_attach_type: BPF_XDP.
const BPF_XDP: u32 = 37;
const BPF_ANY: u64 = 0;

/// `XDP_FLAGS_SKB_MODE`: generic XDP, run on the skb after the driver.
pub(super) const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
/// `XDP_FLAGS_DRV_MODE`: native XDP, run by the driver.
pub(super) const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

// Instruction encoding (linux/bpf_common.h, linux/bpf.h).
const BPF_LDX_MEM_W: u8 = 0x61; // BPF_LDX | BPF_MEM | BPF_W
const BPF_LDX_MEM_H: u8 = 0x69; // BPF_LDX | BPF_MEM | BPF_H
const BPF_LDX_MEM_B: u8 = 0x71; // BPF_LDX | BPF_MEM | BPF_B
const BPF_STX_MEM_DW: u8 = 0x7b; // BPF_STX | BPF_MEM | BPF_DW
const BPF_LD_IMM64: u8 = 0x18; // BPF_LD | BPF_IMM | BPF_DW
const BPF_MOV64_IMM: u8 = 0xb7; // BPF_ALU64 | BPF_MOV | BPF_K
const BPF_MOV64_REG: u8 = 0xbf; // BPF_ALU64 | BPF_MOV | BPF_X
const BPF_ADD64_IMM: u8 = 0x07; // BPF_ALU64 | BPF_ADD | BPF_K
const BPF_JNE_IMM: u8 = 0x55; // BPF_JMP | BPF_JNE | BPF_K
const BPF_JGT_REG: u8 = 0x2d; // BPF_JMP | BPF_JGT | BPF_X
const BPF_CALL: u8 = 0x85; // BPF_JMP | BPF_CALL
const BPF_EXIT: u8 = 0x95; // BPF_JMP | BPF_EXIT
const BPF_PSEUDO_MAP_FD: u8 = 1;
const BPF_FUNC_KTIME_GET_NS: i32 = 5;
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
const BPF_FUNC_XDP_ADJUST_META: i32 = 54;
/// Offsets in `struct xdp_md`.
const XDP_MD_DATA: i16 = 0;
const XDP_MD_DATA_END: i16 = 4;
const XDP_MD_DATA_META: i16 = 8;
const XDP_MD_RX_QUEUE_INDEX: i16 = 16;
/// `XDP_PASS`: the program's answer when the queue has no socket.
const XDP_PASS: i32 = 2;

/// The receive stamp the program puts before a UDP frame as XDP
/// metadata, which AF_XDP copies into the chunk with the frame (copy mode
/// copies from `data_meta`): see [`PacketBuf::take_rx_stamp`].
use crate::pool::{RX_STAMP_LEN as STAMP_META, RX_STAMP_MAGIC as STAMP_MAGIC};
#[cfg(doc)]
use crate::PacketBuf;

/// `struct bpf_insn`.
#[repr(C)]
#[derive(Clone, Copy)]
struct Insn {
    code: u8,
    /// `dst_reg:4, src_reg:4` — a C bitfield, so the nibble order follows
    /// the byte order.
    regs: u8,
    off: i16,
    imm: i32,
}

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    let regs = if cfg!(target_endian = "little") {
        (src << 4) | dst
    } else {
        (dst << 4) | src
    };
    Insn {
        code,
        regs,
        off,
        imm,
    }
}

/// Instructions of [`program`]; `REDIRECT` is the index of its last part.
const PROGRAM_LEN: usize = 31;
const REDIRECT: usize = 25;

/// Jump offset from instruction `at` to [`REDIRECT`].
const fn to_redirect(at: usize) -> i16 {
    (REDIRECT - at - 1) as i16
}

/// The redirect program for the map `map_fd`. An IPv4 UDP frame first
/// gets its receive time as metadata ([`STAMP_META`]) for the
/// `SO_TIMESTAMP*` of the socket it is for, taken where the kernel would
/// stamp it for its own sockets (other frames go straight on: a stamp
/// costs two helper calls):
///
/// ```text
///  0 r6 = r1                          ; ctx, kept across calls
///  1 r2 = *(u32 *)(r6 + 0)            ; data
///  2 r3 = *(u32 *)(r6 + 4)            ; data_end
///  3 r4 = r2
///  4 r4 += 24                         ; Ethernet header and IPv4 up to its protocol
///  5 if r4 > r3 goto redirect
///  6 r5 = *(u16 *)(r2 + 12)           ; EtherType
///  7 if r5 != 0x0008 goto redirect    ; 0x0800 read little-endian
///  8 r5 = *(u8 *)(r2 + 23)            ; IPv4 protocol
///  9 if r5 != 17 goto redirect        ; UDP
/// 10 call bpf_ktime_get_ns            ; helper 5
/// 11 r7 = r0
/// 12 r1 = r6
/// 13 r2 = -16
/// 14 call bpf_xdp_adjust_meta         ; helper 54
/// 15 if r0 != 0 goto redirect
/// 16 r2 = *(u32 *)(r6 + 8)            ; data_meta
/// 17 r3 = *(u32 *)(r6 + 0)            ; data
/// 18 r4 = r2
/// 19 r4 += 16
/// 20 if r4 > r3 goto redirect
/// 21 *(u64 *)(r2 + 0) = r7            ; the time
/// 22 r5 = STAMP_MAGIC ll              ; ld_imm64: two instructions
/// 24 *(u64 *)(r2 + 8) = r5
/// redirect:
/// 25 r2 = *(u32 *)(r6 + 16)           ; ctx->rx_queue_index
/// 26 r1 = map_fd ll                   ; ld_imm64, src = BPF_PSEUDO_MAP_FD
/// 28 r3 = 2                           ; XDP_PASS: the action when the slot is empty
/// 29 call bpf_redirect_map            ; helper 51
/// 30 exit                             ; r0 = XDP_REDIRECT or XDP_PASS
/// ```
fn program(map_fd: i32) -> [Insn; PROGRAM_LEN] {
    let magic = STAMP_MAGIC;
    [
        insn(BPF_MOV64_REG, 6, 1, 0, 0),
        insn(BPF_LDX_MEM_W, 2, 6, XDP_MD_DATA, 0),
        insn(BPF_LDX_MEM_W, 3, 6, XDP_MD_DATA_END, 0),
        insn(BPF_MOV64_REG, 4, 2, 0, 0),
        insn(BPF_ADD64_IMM, 4, 0, 0, 24),
        insn(BPF_JGT_REG, 4, 3, to_redirect(5), 0),
        insn(BPF_LDX_MEM_H, 5, 2, 12, 0),
        insn(BPF_JNE_IMM, 5, 0, to_redirect(7), 0x0008),
        insn(BPF_LDX_MEM_B, 5, 2, 23, 0),
        insn(BPF_JNE_IMM, 5, 0, to_redirect(9), 17),
        insn(BPF_CALL, 0, 0, 0, BPF_FUNC_KTIME_GET_NS),
        insn(BPF_MOV64_REG, 7, 0, 0, 0),
        insn(BPF_MOV64_REG, 1, 6, 0, 0),
        insn(BPF_MOV64_IMM, 2, 0, 0, -(STAMP_META as i32)),
        insn(BPF_CALL, 0, 0, 0, BPF_FUNC_XDP_ADJUST_META),
        insn(BPF_JNE_IMM, 0, 0, to_redirect(15), 0),
        insn(BPF_LDX_MEM_W, 2, 6, XDP_MD_DATA_META, 0),
        insn(BPF_LDX_MEM_W, 3, 6, XDP_MD_DATA, 0),
        insn(BPF_MOV64_REG, 4, 2, 0, 0),
        insn(BPF_ADD64_IMM, 4, 0, 0, STAMP_META as i32),
        insn(BPF_JGT_REG, 4, 3, to_redirect(20), 0),
        insn(BPF_STX_MEM_DW, 2, 7, 0, 0),
        insn(BPF_LD_IMM64, 5, 0, 0, magic as u32 as i32),
        insn(0, 0, 0, 0, (magic >> 32) as u32 as i32),
        insn(BPF_STX_MEM_DW, 2, 5, 8, 0),
        // redirect:
        insn(BPF_LDX_MEM_W, 2, 6, XDP_MD_RX_QUEUE_INDEX, 0),
        insn(BPF_LD_IMM64, 1, BPF_PSEUDO_MAP_FD, 0, map_fd),
        insn(0, 0, 0, 0, 0), // second half of the 64-bit immediate
        insn(BPF_MOV64_IMM, 3, 0, 0, XDP_PASS),
        insn(BPF_CALL, 0, 0, 0, BPF_FUNC_REDIRECT_MAP),
        insn(BPF_EXIT, 0, 0, 0, 0),
    ]
}

/// The leading fields of `union bpf_attr` for BPF_MAP_CREATE (the kernel
/// zero-fills the rest, which is what we want).
#[repr(C)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

/// `union bpf_attr` for BPF_MAP_UPDATE_ELEM.
#[repr(C)]
struct MapUpdateAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// The leading fields of `union bpf_attr` for BPF_PROG_LOAD.
#[repr(C)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// The leading fields of `union bpf_attr` for BPF_LINK_CREATE.
#[repr(C)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

/// `union bpf_attr` for BPF_LINK_DETACH.
#[repr(C)]
struct LinkDetachAttr {
    link_fd: u32,
}

/// Marker for the attribute structs above: `#[repr(C)]`, no padding the
/// kernel could misread, every pointer field a `u64` address that the
/// caller keeps valid for the duration of the call.
///
/// # Safety
/// Only for `#[repr(C)]` prefixes of `union bpf_attr` whose embedded
/// addresses point to live memory of the sizes the other fields state.
unsafe trait BpfAttr {}
// SAFETY: each is a repr(C) prefix of union bpf_attr for its command; the
// functions below fill their address fields from borrowed locals that live
// across the call.
unsafe impl BpfAttr for MapCreateAttr {}
// SAFETY: as above.
unsafe impl BpfAttr for MapUpdateAttr {}
// SAFETY: as above.
unsafe impl BpfAttr for ProgLoadAttr {}
// SAFETY: as above.
unsafe impl BpfAttr for LinkCreateAttr {}
// SAFETY: as above (no addresses).
unsafe impl BpfAttr for LinkDetachAttr {}

fn sys_bpf<A: BpfAttr>(cmd: c_int, attr: &mut A) -> io::Result<c_int> {
    // SAFETY: `attr` is a live, writable bpf_attr prefix of exactly the size
    // passed (the kernel copies min(size, sizeof(bpf_attr)) bytes and
    // zero-fills the rest); the addresses inside it are valid per the
    // `BpfAttr` contract. bpf(2) touches no other memory of ours.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            libc::c_long::from(cmd),
            attr as *mut A,
            std::mem::size_of::<A>() as libc::c_long,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as c_int)
    }
}

fn owned(fd: c_int) -> OwnedFd {
    // SAFETY: bpf(2) just returned this descriptor (close-on-exec, as all
    // BPF object descriptors are); nothing else owns it.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

fn name16(s: &str) -> [u8; 16] {
    let mut n = [0u8; 16];
    for (d, b) in n.iter_mut().zip(s.bytes().take(15)) {
        *d = b;
    }
    n
}

/// An XSKMAP with `entries` slots (one per queue).
pub(super) fn create_xskmap(entries: u32) -> io::Result<OwnedFd> {
    let mut attr = MapCreateAttr {
        map_type: BPF_MAP_TYPE_XSKMAP,
        key_size: 4,
        value_size: 4,
        max_entries: entries,
        map_flags: 0,
        inner_map_fd: 0,
        numa_node: 0,
        map_name: name16("ixora_xsks"),
    };
    sys_bpf(BPF_MAP_CREATE, &mut attr).map(owned)
}

/// Put AF_XDP socket `sock_fd` into slot `index` of `map`.
pub(super) fn xskmap_set(map: &OwnedFd, index: u32, sock_fd: i32) -> io::Result<()> {
    let key = index;
    let value = sock_fd as u32;
    let mut attr = MapUpdateAttr {
        map_fd: map.as_raw_fd() as u32,
        _pad: 0,
        key: &key as *const u32 as u64,
        value: &value as *const u32 as u64,
        flags: BPF_ANY,
    };
    sys_bpf(BPF_MAP_UPDATE_ELEM, &mut attr).map(drop)
}

/// Load the redirect program for `map`. On a verifier rejection the error
/// carries the verifier's log.
pub(super) fn load_redirect_prog(map: &OwnedFd) -> io::Result<OwnedFd> {
    let insns = program(map.as_raw_fd());
    let license = c"GPL";
    let load = |log: Option<&mut [u8]>| {
        let (log_level, log_size, log_buf) = match log {
            Some(buf) => (1, buf.len() as u32, buf.as_mut_ptr() as u64),
            None => (0, 0, 0),
        };
        let mut attr = ProgLoadAttr {
            prog_type: BPF_PROG_TYPE_XDP,
            insn_cnt: insns.len() as u32,
            insns: insns.as_ptr() as u64,
            license: license.as_ptr() as u64,
            log_level,
            log_size,
            log_buf,
            kern_version: 0,
            prog_flags: 0,
            prog_name: name16("ixora_xsk_redir"),
            prog_ifindex: 0,
            expected_attach_type: BPF_XDP,
        };
        // The verifier can ask for a retry (EAGAIN) under memory pressure.
        let mut tries = 0;
        loop {
            match sys_bpf(BPF_PROG_LOAD, &mut attr) {
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) && tries < 5 => tries += 1,
                r => return r,
            }
        }
    };
    match load(None) {
        Ok(fd) => Ok(owned(fd)),
        Err(first) => {
            // Load again with the verifier log on, to say why.
            let mut log = vec![0u8; 64 * 1024];
            let second = load(Some(&mut log));
            if let Ok(fd) = second {
                return Ok(owned(fd));
            }
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let text = String::from_utf8_lossy(&log[..end]);
            let text = text.trim();
            Err(io::Error::new(
                first.kind(),
                if text.is_empty() {
                    format!("loading the XDP program failed: {first}")
                } else {
                    format!("the kernel verifier rejected the XDP program ({first}):\n{text}")
                },
            ))
        }
    }
}

/// Attach `prog` to interface `ifindex` through a BPF link, in the mode
/// `flags` selects (`XDP_FLAGS_DRV_MODE` or `XDP_FLAGS_SKB_MODE`). The
/// program stays attached while the returned descriptor is open.
pub(super) fn attach_xdp_link(prog: &OwnedFd, ifindex: u32, flags: u32) -> io::Result<OwnedFd> {
    let mut attr = LinkCreateAttr {
        prog_fd: prog.as_raw_fd() as u32,
        target_ifindex: ifindex,
        attach_type: BPF_XDP,
        flags,
    };
    sys_bpf(BPF_LINK_CREATE, &mut attr).map(owned)
}

/// Detach `link` from its interface now, whoever else still holds the
/// link descriptor (a child process forked at the wrong moment keeps it
/// open until it execs; closing alone would leave the program attached
/// until then).
pub(super) fn detach_link(link: &OwnedFd) -> io::Result<()> {
    let mut attr = LinkDetachAttr {
        link_fd: link.as_raw_fd() as u32,
    };
    sys_bpf(BPF_LINK_DETACH, &mut attr).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instruction_encoding() {
        let p = program(7);
        assert_eq!(std::mem::size_of::<Insn>(), 8);
        // r6 = r1: dst r6, src r1.
        assert_eq!((p[0].code, p[0].regs), (0xbf, 0x16));
        // Every jump lands on the redirect part.
        for (at, i) in p.iter().enumerate() {
            if matches!(i.code, BPF_JNE_IMM | BPF_JGT_REG) {
                assert_eq!(at as i16 + 1 + i.off, REDIRECT as i16, "jump at {at}");
            }
        }
        // The magic's ld_imm64, both halves.
        assert_eq!((p[22].code, p[22].regs), (0x18, 0x05));
        let magic = u64::from(p[22].imm as u32) | u64::from(p[23].imm as u32) << 32;
        assert_eq!(magic, STAMP_MAGIC);
        // redirect: ldx dst r2, src r6, offset 16.
        let r = &p[REDIRECT..];
        assert_eq!((r[0].code, r[0].regs, r[0].off), (0x61, 0x62, 16));
        // ld_imm64 r1 with the pseudo map fd in src.
        assert_eq!((r[1].code, r[1].regs, r[1].imm), (0x18, 0x11, 7));
        assert_eq!((r[3].regs, r[3].imm), (0x03, 2));
        assert_eq!((r[4].code, r[4].imm), (0x85, 51));
        assert_eq!(r[5].code, 0x95);
    }

    #[test]
    fn attr_layouts() {
        // Offsets checked against union bpf_attr in linux/bpf.h.
        assert_eq!(std::mem::size_of::<MapCreateAttr>(), 44);
        assert_eq!(std::mem::size_of::<MapUpdateAttr>(), 32);
        assert_eq!(std::mem::size_of::<ProgLoadAttr>(), 72);
        assert_eq!(std::mem::size_of::<LinkCreateAttr>(), 16);
        assert_eq!(std::mem::size_of::<LinkDetachAttr>(), 4);
    }
}
