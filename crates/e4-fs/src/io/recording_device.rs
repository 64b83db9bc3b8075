//! A device that records every write and flush over an in-memory image, and builds the
//! images a crash could have left (crash-consistency tests, as dm-log-writes does for the
//! kernel).
//!
//! A write is durable only once a later flush has been issued; the writes issued since the
//! last flush may have reached the medium in any subset and order, and the last of them may
//! be torn. A device persists a long write block by block, so the log keeps one entry per
//! `unit` (the filesystem's block size) of every write: any of them can be lost alone.
//!
//! ```
//! use e4_fs::device::Device;
//! use e4_fs::recording_device::RecordingDevice;
//! let device = RecordingDevice::new(vec![0; 8192], 4096);
//! device.write_all_at(&[1; 4096], 0).unwrap();
//! device.flush().unwrap();
//! device.write_all_at(&[2; 4096], 4096).unwrap();
//! let log = device.log();
//! assert_eq!((log.flushes(), log.epoch(1).len()), (1, 1));
//! // Lost: the write after the flush.
//! let crashed = log.image_at_flush(1);
//! let mut block = [0; 4096];
//! crashed.read_exact_at(&mut block, 4096).unwrap();
//! assert_eq!(block, [0; 4096]);
//! ```

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io;
use std::ops::Range;
use std::sync::Arc;

use parking_lot::RwLock;

use super::device::{range, Device};

/// What a torn write leaves: its first sector new (to the first `TORN_SECTOR`-byte boundary
/// of the device), the rest as it was.
pub const TORN_SECTOR: usize = 512;

/// One unit of a recorded write: `bytes` at byte `offset`, inside one unit.
#[derive(Debug, Clone)]
pub struct LoggedWrite {
    pub offset: u64,
    pub bytes: Arc<[u8]>,
}

/// The writes and flushes a [`RecordingDevice`] has seen, over the image it started from.
#[derive(Clone)]
pub struct WriteLog {
    base: Arc<[u8]>,
    unit: usize,
    writes: Vec<LoggedWrite>,
    /// How many writes had been issued when each flush was.
    flushes: Vec<usize>,
}

impl WriteLog {
    /// Flushes issued.
    pub fn flushes(&self) -> usize {
        self.flushes.len()
    }

    /// The writes issued after flush `k` (0: from the start) and before the next flush.
    pub fn epoch(&self, k: usize) -> &[LoggedWrite] {
        &self.writes[self.epoch_range(k)]
    }

    /// Every write issued after flush `k`, to the end of the log.
    pub fn writes_since(&self, k: usize) -> &[LoggedWrite] {
        &self.writes[self.epoch_range(k).start..]
    }

    fn epoch_range(&self, k: usize) -> Range<usize> {
        let start = if k == 0 { 0 } else { self.flushes[k - 1] };
        let end = self.flushes.get(k).copied().unwrap_or(self.writes.len());
        start..end
    }

    /// The image a crash right after flush `k` leaves: the base with every write issued
    /// before that flush.
    pub fn image_at_flush(&self, k: usize) -> CrashImage {
        let image = CrashImage::new(Arc::clone(&self.base), self.unit);
        for write in &self.writes[..self.epoch_range(k).start] {
            image.apply(write);
        }
        image
    }

    /// The image of `point`.
    pub fn crash_image(&self, point: &CrashPoint) -> CrashImage {
        let image = self.image_at_flush(point.flushes);
        image.apply_after(self.writes_since(point.flushes), point);
        image
    }
}

/// A state a crash can leave: what reached the device after which flush.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CrashPoint {
    /// Flushes completed: every write issued before flush number `flushes` is durable.
    pub flushes: usize,
    /// The writes after that flush that also reached the device, as indices into
    /// [`WriteLog::writes_since`], in the order they reached it.
    pub reached: Vec<usize>,
    /// The last of `reached` wrote only its first sector (up to the first [`TORN_SECTOR`]
    /// boundary).
    pub torn: bool,
}

/// A device that applies writes to an in-memory image and logs them, with every flush.
pub struct RecordingDevice {
    base: Arc<[u8]>,
    unit: usize,
    state: RwLock<Recording>,
}

struct Recording {
    bytes: Vec<u8>,
    writes: Vec<LoggedWrite>,
    flushes: Vec<usize>,
}

impl RecordingDevice {
    /// Records from `image`, logging writes in pieces of at most `unit` bytes, each inside
    /// one `unit`-aligned block.
    pub fn new(image: Vec<u8>, unit: usize) -> Self {
        assert!(unit > 0, "a recording unit of 0 bytes");
        RecordingDevice {
            base: Arc::from(image.as_slice()),
            unit,
            state: RwLock::new(Recording {
                bytes: image,
                writes: Vec::new(),
                flushes: Vec::new(),
            }),
        }
    }

    /// Flushes issued so far.
    pub fn flushes(&self) -> usize {
        self.state.read().flushes.len()
    }

    /// A copy of the log so far.
    pub fn log(&self) -> WriteLog {
        let state = self.state.read();
        WriteLog {
            base: Arc::clone(&self.base),
            unit: self.unit,
            writes: state.writes.clone(),
            flushes: state.flushes.clone(),
        }
    }
}

impl Device for RecordingDevice {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let state = self.state.read();
        buf.copy_from_slice(&state.bytes[range(buf.len(), offset, state.bytes.len())?]);
        Ok(())
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut state = self.state.write();
        let r = range(buf.len(), offset, state.bytes.len())?;
        state.bytes[r].copy_from_slice(buf);
        let unit = self.unit as u64;
        let mut done = 0;
        while done < buf.len() {
            let at = offset + done as u64;
            // OK to cast: less than `unit`, a usize.
            let len = ((unit - at % unit) as usize).min(buf.len() - done);
            state.writes.push(LoggedWrite {
                offset: at,
                bytes: Arc::from(&buf[done..done + len]),
            });
            done += len;
        }
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        let mut state = self.state.write();
        let issued = state.writes.len();
        state.flushes.push(issued);
        Ok(())
    }

    fn size(&self) -> u64 {
        self.base.len() as u64
    }
}

/// A crash state's image: the base and the units written over it, kept apart so that
/// thousands of states share one base. A device too, for recovering and checking it.
pub struct CrashImage {
    base: Arc<[u8]>,
    unit: usize,
    /// Unit number to its whole contents, where written.
    written: RwLock<BTreeMap<u64, Arc<[u8]>>>,
}

impl Clone for CrashImage {
    fn clone(&self) -> Self {
        CrashImage {
            base: Arc::clone(&self.base),
            unit: self.unit,
            written: RwLock::new(self.written.read().clone()),
        }
    }
}

impl CrashImage {
    fn new(base: Arc<[u8]>, unit: usize) -> Self {
        CrashImage {
            base,
            unit,
            written: RwLock::default(),
        }
    }

    /// Applies `write` as if it reached the device.
    pub fn apply(&self, write: &LoggedWrite) {
        // OK to unwrap: a logged write was inside the device.
        self.write_all_at(&write.bytes, write.offset).unwrap();
    }

    /// Applies the writes `point` says reached the device, from `since` (the writes after
    /// its flush).
    pub fn apply_after(&self, since: &[LoggedWrite], point: &CrashPoint) {
        for (i, &index) in point.reached.iter().enumerate() {
            let write = &since[index];
            if point.torn && i + 1 == point.reached.len() {
                // OK to cast: less than TORN_SECTOR.
                let to_boundary = TORN_SECTOR - (write.offset % TORN_SECTOR as u64) as usize;
                let kept = write.bytes.len().min(to_boundary);
                // OK to unwrap: a logged write was inside the device.
                self.write_all_at(&write.bytes[..kept], write.offset)
                    .unwrap();
            } else {
                self.apply(write);
            }
        }
    }

    /// The whole image.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut bytes = self.base.to_vec();
        for (&nr, block) in self.written.read().iter() {
            let start = nr as usize * self.unit;
            bytes[start..start + block.len()].copy_from_slice(block);
        }
        bytes
    }

    /// A hash of the image's contents, with the bytes of `ignored` (ranges of the image)
    /// left out: equal images hash alike however they were written.
    pub fn digest(&self, ignored: &[Range<u64>]) -> u64 {
        let mut hasher = DefaultHasher::new();
        for (&nr, block) in self.written.read().iter() {
            let start = nr * self.unit as u64;
            let end = start + block.len() as u64;
            let base = &self.base[start as usize..end as usize];
            let mut new = block.to_vec();
            let mut old = base.to_vec();
            for r in ignored {
                let (from, to) = (r.start.max(start), r.end.min(end));
                if from < to {
                    let cut = (from - start) as usize..(to - start) as usize;
                    new[cut.clone()].fill(0);
                    old[cut].fill(0);
                }
            }
            if new != old {
                nr.hash(&mut hasher);
                new.hash(&mut hasher);
            }
        }
        hasher.finish()
    }

    /// The contents of unit `nr` as they stand.
    fn unit_bytes(&self, nr: u64) -> Arc<[u8]> {
        if let Some(block) = self.written.read().get(&nr) {
            return Arc::clone(block);
        }
        let start = nr as usize * self.unit;
        let end = (start + self.unit).min(self.base.len());
        Arc::from(&self.base[start..end])
    }
}

impl Device for CrashImage {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        range(buf.len(), offset, self.base.len())?;
        let unit = self.unit as u64;
        let mut done = 0;
        while done < buf.len() {
            let at = offset + done as u64;
            let within = (at % unit) as usize;
            let len = (self.unit - within).min(buf.len() - done);
            let block = self.unit_bytes(at / unit);
            buf[done..done + len].copy_from_slice(&block[within..within + len]);
            done += len;
        }
        Ok(())
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        range(buf.len(), offset, self.base.len())?;
        let unit = self.unit as u64;
        let mut done = 0;
        while done < buf.len() {
            let at = offset + done as u64;
            let within = (at % unit) as usize;
            let len = (self.unit - within).min(buf.len() - done);
            let nr = at / unit;
            let new: Arc<[u8]> = if len == self.unit {
                Arc::from(&buf[done..done + len])
            } else {
                let mut block = self.unit_bytes(nr).to_vec();
                block[within..within + len].copy_from_slice(&buf[done..done + len]);
                Arc::from(block)
            };
            self.written.write().insert(nr, new);
            done += len;
        }
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    fn size(&self) -> u64 {
        self.base.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn byte_at(device: &impl Device, offset: u64) -> u8 {
        let mut b = [0];
        device.read_exact_at(&mut b, offset).unwrap();
        b[0]
    }

    #[test]
    fn a_long_write_is_logged_per_unit_and_flushes_split_it_into_epochs() {
        let device = RecordingDevice::new(vec![0; 4 * 1024], 1024);
        device.write_all_at(&[1; 1536], 512).unwrap();
        device.flush().unwrap();
        device.write_all_at(&[2; 10], 3000).unwrap();
        let log = device.log();
        let offsets: Vec<(u64, usize)> = log
            .epoch(0)
            .iter()
            .map(|w| (w.offset, w.bytes.len()))
            .collect();
        assert_eq!(offsets, [(512, 512), (1024, 1024)]);
        assert_eq!(log.epoch(1).len(), 1);
        assert_eq!(log.writes_since(0).len(), 3);
        assert_eq!(byte_at(&device, 3005), 2, "the device shows every write");
    }

    #[test]
    fn a_crash_image_holds_the_flushed_writes_and_the_chosen_later_ones_torn_or_whole() {
        let device = RecordingDevice::new(vec![0; 4 * 1024], 1024);
        device.write_all_at(&[1; 1024], 0).unwrap();
        device.flush().unwrap();
        device.write_all_at(&[2; 1024], 1024).unwrap();
        device.write_all_at(&[3; 1024], 2048).unwrap();
        device.write_all_at(&[4; 1024], 1024).unwrap();
        let log = device.log();
        let at = |point: CrashPoint| {
            let image = log.crash_image(&point);
            [0, 1024, 1023 + 512, 1024 + 512, 2048].map(|offset| byte_at(&image, offset))
        };
        let point = |reached: &[usize], torn| CrashPoint {
            flushes: 1,
            reached: reached.to_vec(),
            torn,
        };
        assert_eq!(at(point(&[], false)), [1, 0, 0, 0, 0]);
        assert_eq!(at(point(&[1], false)), [1, 0, 0, 0, 3]);
        // Reordered: the older write to the same block lands last.
        assert_eq!(at(point(&[2, 0], false)), [1, 2, 2, 2, 0]);
        assert_eq!(at(point(&[0, 2], true)), [1, 4, 4, 2, 0]);
        let nothing = CrashPoint {
            flushes: 0,
            reached: Vec::new(),
            torn: false,
        };
        assert_eq!(at(nothing), [0; 5]);
    }

    #[test]
    fn a_torn_write_keeps_what_it_wrote_up_to_the_first_sector_boundary() {
        let device = RecordingDevice::new(vec![0; 4096], 4096);
        device.flush().unwrap();
        device.write_all_at(&[5; 2000], 1000).unwrap();
        let torn = CrashPoint {
            flushes: 1,
            reached: vec![0],
            torn: true,
        };
        let image = device.log().crash_image(&torn);
        let shown = [999, 1000, 1023, 1024, 2999].map(|offset| byte_at(&image, offset));
        assert_eq!(shown, [0, 5, 5, 0, 0]);
    }

    #[test]
    fn the_digest_sees_contents_not_history_and_skips_what_it_is_told_to() {
        let log = RecordingDevice::new(vec![0; 4 * 1024], 1024).log();
        let a = log.image_at_flush(0);
        let b = a.clone();
        b.write_all_at(&[0; 100], 10).unwrap();
        assert_eq!(a.digest(&[]), b.digest(&[]), "a write of what was there");
        b.write_all_at(&[7; 2], 2000).unwrap();
        assert_ne!(a.digest(&[]), b.digest(&[]));
        let clock = [1990..2010, 0..1];
        assert_eq!(a.digest(&clock), b.digest(&clock));
        assert_eq!(b.to_vec()[2001], 7);
    }
}
