//! Cached bodies the kernel can send without a copy. A large body is written once into its own
//! sealed `memfd` (no write, grow, shrink or further seal can be applied afterwards, so its bytes
//! never change while a `sendfile` may still be reading them) and mapped read-only; the `Bytes`
//! handed out are views of that mapping, so every other reader (TLS, gzip, Redis, tests) sees
//! ordinary bytes. The plain-TCP stream of the listener (`listener::sendfile`) recognises a view
//! by its address and sends it from the file instead of copying it into the socket.
//!
//! Each sealed body holds a file descriptor, so they are capped (`enable`): past the cap, or when
//! anything fails, a body stays on the heap and is copied as before. Nothing is ever served
//! differently, only sent differently.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use bytes::Bytes;

/// Bodies below this stay on the heap: copying them costs less than the extra system call and
/// the page rounding (a 5 KB body would take two pages).
pub const MIN_SEALED_BYTES: usize = 32 * 1024;

const PAGE: usize = 4096;

/// What the kernel holds for each sealed body beside its pages (inode, dentry, open file,
/// mapping), rounded up.
const KERNEL_BYTES_PER_FILE: usize = 2048;

/// Where each live mapping starts, with its length and file.
static REGIONS: RwLock<BTreeMap<usize, Region>> = RwLock::new(BTreeMap::new());
/// How many bodies may be sealed at once (file descriptors), and how many are.
static MAX_SEALED: AtomicUsize = AtomicUsize::new(0);
static SEALED: AtomicUsize = AtomicUsize::new(0);

#[derive(Clone, Copy, Debug)]
struct Region {
    len: usize,
    fd: RawFd,
}

/// Where the kernel can find a view's bytes: a file and an offset in it. Valid while the view
/// it was looked up for is alive (the view keeps its mapping and file open).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InFile {
    pub fd: RawFd,
    pub offset: u64,
}

/// Lets up to `max_files` bodies be sealed at once; 0 turns sealing off (bodies already sealed
/// stay so until they are dropped).
pub fn enable(max_files: usize) {
    MAX_SEALED.store(max_files, Ordering::Release);
}

/// Turns sealing on within what the process may hold: raises the open-file limit to its hard
/// limit, keeps `reserved_fds` of it for connections and everything else, and half of the
/// kernel's mapping limit for the allocator and thread stacks. Returns the cap it set.
pub fn enable_within_limits(reserved_fds: usize) -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: reads and sets this process's own limit through a valid struct.
    let files = unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            if limit.rlim_cur < limit.rlim_max {
                let raised = libc::rlimit {
                    rlim_cur: limit.rlim_max,
                    rlim_max: limit.rlim_max,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                    limit = raised;
                }
            }
            usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX)
        } else {
            0
        }
    };
    let maps = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|text| text.trim().parse::<usize>().ok())
        .unwrap_or(0);
    let cap = files.saturating_sub(reserved_fds).min(maps / 2);
    enable(cap);
    cap
}

/// `body` as a view of a sealed file when it is large enough and room is left, else as it is.
pub fn seal(body: Bytes) -> Bytes {
    if body.len() < MIN_SEALED_BYTES || !reserve() {
        return body;
    }
    match Mapping::new(&body) {
        Ok(mapping) => Bytes::from_owner(mapping),
        Err(e) => {
            SEALED.fetch_sub(1, Ordering::AcqRel);
            tracing::debug!(error = %e, len = body.len(), "body kept on the heap");
            body
        }
    }
}

/// The file behind `bytes` when they lie wholly inside one sealed body.
pub fn in_file(bytes: &[u8]) -> Option<InFile> {
    if bytes.is_empty() || SEALED.load(Ordering::Acquire) == 0 {
        return None;
    }
    let start = bytes.as_ptr() as usize;
    let regions = read();
    let (&base, region) = regions.range(..=start).next_back()?;
    let offset = start - base;
    (offset + bytes.len() <= region.len).then_some(InFile {
        fd: region.fd,
        offset: offset as u64,
    })
}

/// Memory `body` holds: whole pages and the kernel's objects for the file and its mapping
/// when it is a sealed file, its length otherwise.
pub fn footprint(body: &Bytes) -> usize {
    if in_file(body).is_some() {
        body.len().div_ceil(PAGE) * PAGE + KERNEL_BYTES_PER_FILE
    } else {
        body.len()
    }
}

/// How many bodies are sealed now.
pub fn sealed() -> usize {
    SEALED.load(Ordering::Acquire)
}

fn reserve() -> bool {
    let max = MAX_SEALED.load(Ordering::Acquire);
    SEALED
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < max).then_some(n + 1)
        })
        .is_ok()
}

fn read() -> RwLockReadGuard<'static, BTreeMap<usize, Region>> {
    // Every use is one insert, remove or lookup, which a panic cannot leave half done.
    REGIONS.read().unwrap_or_else(|p| p.into_inner())
}

fn write() -> RwLockWriteGuard<'static, BTreeMap<usize, Region>> {
    REGIONS.write().unwrap_or_else(|p| p.into_inner())
}

/// One body's sealed file, mapped read-only. Dropping it forgets the region before the mapping
/// goes, so no lookup can name an address that might be reused.
struct Mapping {
    ptr: *const u8,
    len: usize,
    file: File,
}

// The mapping is read-only and immutable (sealed) for its whole life.
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

impl Mapping {
    fn new(body: &[u8]) -> std::io::Result<Mapping> {
        let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
        // SAFETY: a valid C string and flags; the result is checked.
        let fd = unsafe { libc::memfd_create(c"icecache-body".as_ptr(), flags) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and is owned by nothing else.
        let mut file = unsafe { File::from_raw_fd(fd) };
        file.write_all(body)?;
        let seals =
            libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE | libc::F_SEAL_SEAL;
        // SAFETY: fcntl on an open descriptor; the result is checked.
        if unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, seals) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: maps `body.len()` bytes of a file of exactly that size, read-only and shared;
        // the result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                body.len(),
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let mapping = Mapping {
            ptr: ptr.cast::<u8>(),
            len: body.len(),
            file,
        };
        write().insert(
            ptr as usize,
            Region {
                len: body.len(),
                fd: mapping.file.as_raw_fd(),
            },
        );
        Ok(mapping)
    }
}

impl AsRef<[u8]> for Mapping {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `ptr` maps `len` readable bytes until `drop`, and the file is sealed.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        write().remove(&(self.ptr as usize));
        // SAFETY: unmaps exactly what `new` mapped; nothing refers to it any more (every view
        // held this owner).
        unsafe { libc::munmap(self.ptr.cast_mut().cast(), self.len) };
        SEALED.fetch_sub(1, Ordering::AcqRel);
        // The file closes after this; data the kernel still sends keeps its pages.
    }
}

/// Sealing is process-wide: tests that turn it on or off hold this while they run.
#[cfg(test)]
pub fn sealing() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let guard = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    enable(1 << 20);
    guard
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(len: usize) -> Bytes {
        (0..len).map(|i| (i % 251) as u8).collect::<Vec<_>>().into()
    }

    #[test]
    fn a_large_body_reads_the_same_and_lies_in_a_file() {
        let _on = sealing();
        let plain = body(MIN_SEALED_BYTES + 100);
        let sealed = seal(plain.clone());
        assert_eq!(sealed, plain);
        assert_ne!(sealed.as_ptr(), plain.as_ptr());
        assert_eq!(in_file(&sealed).map(|f| f.offset), Some(0));
        let tail = sealed.slice(1000..);
        assert_eq!(in_file(&tail).map(|f| f.offset), Some(1000));
        assert_eq!(
            footprint(&sealed),
            (MIN_SEALED_BYTES + 100).div_ceil(PAGE) * PAGE + KERNEL_BYTES_PER_FILE
        );
    }

    #[test]
    fn a_small_body_stays_on_the_heap() {
        let _on = sealing();
        let plain = body(MIN_SEALED_BYTES - 1);
        let kept = seal(plain.clone());
        assert_eq!(kept.as_ptr(), plain.as_ptr());
        assert_eq!(in_file(&kept), None);
        assert_eq!(footprint(&kept), kept.len());
    }

    #[test]
    fn the_file_cannot_be_written_grown_or_shrunk() {
        let _on = sealing();
        let sealed = seal(body(MIN_SEALED_BYTES));
        let fd = in_file(&sealed).expect("sealed").fd;
        // SAFETY: fcntl and write on a descriptor the live view keeps open.
        let seals = unsafe { libc::fcntl(fd, libc::F_GET_SEALS) };
        for seal in [
            libc::F_SEAL_WRITE,
            libc::F_SEAL_GROW,
            libc::F_SEAL_SHRINK,
            libc::F_SEAL_SEAL,
        ] {
            assert_ne!(seals & seal, 0, "seal {seal:#x} missing");
        }
        let written = unsafe { libc::pwrite(fd, b"x".as_ptr().cast(), 1, 0) };
        assert_eq!(written, -1);
        assert_eq!(unsafe { libc::ftruncate(fd, 0) }, -1);
        assert_eq!(sealed, body(MIN_SEALED_BYTES));
    }

    #[test]
    fn a_dropped_body_is_forgotten_once_its_last_view_goes() {
        let _on = sealing();
        let before = sealed();
        let sealed_body = seal(body(MIN_SEALED_BYTES * 2));
        let view = sealed_body.slice(10..20_000);
        let address = view.as_ptr() as usize;
        drop(sealed_body);
        assert_eq!(sealed(), before + 1, "a view keeps the file");
        assert!(in_file(&view).is_some());
        drop(view);
        assert_eq!(sealed(), before);
        assert!(read()
            .range(..=address)
            .next_back()
            .is_none_or(|(&base, r)| base + r.len <= address));
    }

    #[test]
    fn past_the_cap_bodies_stay_on_the_heap() {
        let _on = sealing();
        enable(sealed());
        let plain = body(MIN_SEALED_BYTES);
        assert_eq!(in_file(&seal(plain)), None);
        enable(0);
        assert_eq!(in_file(&seal(body(MIN_SEALED_BYTES))), None);
    }

    #[test]
    fn heap_bytes_are_never_taken_for_a_file() {
        let _on = sealing();
        let _sealed = seal(body(MIN_SEALED_BYTES));
        let heap = body(MIN_SEALED_BYTES);
        assert_eq!(in_file(&heap), None);
        assert_eq!(in_file(&[]), None);
    }
}
