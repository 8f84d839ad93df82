//! DDS snapshot files (`DVector::save`/`load`, `DMap::save`/`load`): a header naming the
//! kind, element type, length and checksum, then the elements; written atomically.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

const MAGIC: &[u8; 8] = b"STRADSv1";

#[derive(serde::Serialize, serde::Deserialize)]
struct Header {
    kind: String,
    element: String,
    len: u64,
    checksum: u64,
}

/// Runs `f` on the driver (rank 0) only and gives its outcome to every rank (a
/// collective); in a world of one (`comm` is `None`) simply runs `f`. A failure on rank 0
/// is an error naming `op` on every rank.
pub(crate) fn on_driver<R: serde::Serialize + serde::de::DeserializeOwned>(
    comm: Option<&crate::cluster::collective::Comm>,
    op: &str,
    f: impl FnOnce() -> Result<R>,
) -> Result<R> {
    let Some(comm) = comm else {
        return f();
    };
    let outcome: std::result::Result<Option<R>, String> = if comm.rank() == 0 {
        f().map(Some).map_err(|e| e.to_string())
    } else {
        Ok(None)
    };
    match comm.broadcast(0, outcome)? {
        Ok(Some(r)) => Ok(r),
        Ok(None) => Err(Error::Transport(format!("{op}: rank 0 sent no outcome"))),
        Err(e) => Err(Error::Config(format!("{op} on rank 0: {e}"))),
    }
}

/// Writes a snapshot atomically: temp file, fsync, rename.
pub(crate) fn save_snapshot<T: serde::Serialize>(
    path: &Path,
    kind: &str,
    items: &[T],
) -> Result<()> {
    let mut file = SnapshotWriter::create::<T>(path, kind, items.len())?;
    let what = format!("{kind} for {}", path.display());
    crate::cluster::collective::encode_in_chunks(items, &[], &what, |c| file.write(&c))?;
    file.finish()
}

/// A snapshot file written as its elements arrive, one piece at a time (see
/// [`save_snapshot`]): nothing holds the whole payload. The header, which names the
/// payload's checksum, is written last into room kept for it at the front: the largest
/// header of this kind and type, the real one padded with zeros (which the reader ignores:
/// a header is decoded from the front of its room).
pub(crate) struct SnapshotWriter {
    path: PathBuf,
    tmp: PathBuf,
    file: Option<std::io::BufWriter<std::fs::File>>,
    header: Header,
    room: usize,
    hash: u64,
}

impl SnapshotWriter {
    /// Starts `path`'s temporary file for `len` elements of `T`.
    pub(crate) fn create<T>(path: &Path, kind: &str, len: usize) -> Result<Self> {
        let header = Header {
            kind: kind.to_string(),
            element: std::any::type_name::<T>().to_string(),
            len: len as u64,
            checksum: u64::MAX,
        };
        let room = encode_header(&header)?.len();
        let tmp: PathBuf = {
            let mut name = path.file_name().unwrap_or_default().to_os_string();
            name.push(format!(".tmp.{}", std::process::id()));
            path.with_file_name(name)
        };
        let file = std::fs::File::create(&tmp).map_err(|e| Error::io(path, e))?;
        let mut out = SnapshotWriter {
            path: path.to_path_buf(),
            tmp,
            file: Some(std::io::BufWriter::with_capacity(1 << 20, file)),
            header,
            room,
            hash: crate::util::FNV1A_START,
        };
        // Room for the magic, the header's length and the header; then the payload, which
        // starts as postcard starts a sequence: with its length.
        out.put(&vec![0; MAGIC.len() + 4 + room])?;
        let prefix = postcard::to_stdvec(&len).map_err(|e| Error::Codec {
            what: "snapshot length".into(),
            message: e.to_string(),
        })?;
        out.write(&prefix)?;
        Ok(out)
    }

    /// Appends encoded elements to the payload.
    pub(crate) fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.hash = crate::util::fnv1a_extend(self.hash, bytes);
        self.put(bytes)
    }

    fn put(&mut self, bytes: &[u8]) -> Result<()> {
        let file = self
            .file
            .as_mut()
            .expect("an unfinished snapshot has its file");
        file.write_all(bytes).map_err(|e| Error::io(&self.path, e))
    }

    /// Writes the header, syncs and renames the file into place.
    pub(crate) fn finish(mut self) -> Result<()> {
        use std::io::{Seek, SeekFrom};
        self.header.checksum = self.hash;
        let mut header = encode_header(&self.header)?;
        header.resize(self.room, 0);
        let file = self
            .file
            .take()
            .expect("an unfinished snapshot has its file");
        let done = (|| -> std::io::Result<()> {
            let mut f = file.into_inner().map_err(|e| e.into_error())?;
            f.seek(SeekFrom::Start(0))?;
            f.write_all(MAGIC)?;
            f.write_all(&(header.len() as u32).to_le_bytes())?;
            f.write_all(&header)?;
            f.sync_all()?;
            std::fs::rename(&self.tmp, &self.path)
        })();
        done.map_err(|e| Error::io(&self.path, e))
    }
}

impl Drop for SnapshotWriter {
    /// An unfinished (or failed) snapshot leaves no temporary file behind.
    fn drop(&mut self) {
        drop(self.file.take());
        if self.tmp.exists() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

fn encode_header(header: &Header) -> Result<Vec<u8>> {
    postcard::to_stdvec(header).map_err(|e| Error::Codec {
        what: "snapshot header".into(),
        message: e.to_string(),
    })
}

/// Reads a snapshot, checking magic, kind, element type, length and checksum.
pub(crate) fn load_snapshot<T: serde::de::DeserializeOwned>(
    path: &Path,
    kind: &str,
) -> Result<Vec<T>> {
    let (mut file, len) = SnapshotReader::open::<T>(path, kind)?;
    let items = file.take(len)?;
    file.finish()?;
    Ok(items)
}

/// A snapshot file read a piece at a time (see [`load_snapshot`]): the elements are
/// decoded from a buffer of about [`READ_PIECE`] bytes, so nothing holds the whole file,
/// and the checksum is checked by [`SnapshotReader::finish`] once every byte has been read.
pub(crate) struct SnapshotReader {
    path: PathBuf,
    file: std::fs::File,
    buf: Vec<u8>,
    /// Where the undecoded bytes of `buf` start.
    pos: usize,
    ended: bool,
    hash: u64,
    checksum: u64,
    left: usize,
}

/// How much a [`SnapshotReader`] reads at a time.
const READ_PIECE: u64 = 1 << 20;

impl SnapshotReader {
    /// Opens `path`, checks its header (magic, kind, element type) and returns the reader
    /// and the number of elements.
    pub(crate) fn open<T>(path: &Path, kind: &str) -> Result<(Self, usize)> {
        use std::io::Read;
        let bad = |message: String| Error::BadSnapshot {
            path: path.to_path_buf(),
            message,
        };
        let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        let mut front = [0u8; 12];
        match file.read_exact(&mut front) {
            Ok(()) if &front[..8] == MAGIC => {}
            Ok(()) => return Err(bad("not a strads-ap snapshot (bad magic)".into())),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(bad("not a strads-ap snapshot (bad magic)".into()))
            }
            Err(e) => return Err(Error::io(path, e)),
        }
        let hlen = u32::from_le_bytes(front[8..12].try_into().expect("4 bytes")) as u64;
        let mut body = Vec::new();
        (&mut file)
            .take(hlen)
            .read_to_end(&mut body)
            .map_err(|e| Error::io(path, e))?;
        if body.len() as u64 != hlen {
            return Err(bad("truncated header".into()));
        }
        let header: Header =
            postcard::from_bytes(&body).map_err(|e| bad(format!("bad header: {e}")))?;
        if header.kind != kind {
            return Err(bad(format!("holds a {}, not a {kind}", header.kind)));
        }
        let element = std::any::type_name::<T>();
        if header.element != element {
            return Err(bad(format!(
                "holds elements of type {}, but {element} was asked for",
                header.element
            )));
        }
        let mut reader = SnapshotReader {
            path: path.to_path_buf(),
            file,
            buf: Vec::new(),
            pos: 0,
            ended: false,
            hash: crate::util::FNV1A_START,
            checksum: header.checksum,
            left: 1,
        };
        // The payload is a postcard sequence: its length, then the elements.
        let len = reader.take::<usize>(1)?[0];
        if len as u64 != header.len {
            return Err(reader.bad(format!(
                "header says {} elements, payload has {len}",
                header.len
            )));
        }
        reader.left = len;
        Ok((reader, len))
    }

    fn bad(&self, message: String) -> Error {
        Error::BadSnapshot {
            path: self.path.clone(),
            message,
        }
    }

    /// The next `count` elements.
    pub(crate) fn take<T: serde::de::DeserializeOwned>(&mut self, count: usize) -> Result<Vec<T>> {
        if count > self.left {
            return Err(self.bad(format!("{count} more elements asked of {} left", self.left)));
        }
        let mut out = Vec::with_capacity(count.min(1 << 16));
        while out.len() < count {
            match postcard::take_from_bytes::<T>(&self.buf[self.pos..]) {
                Ok((value, rest)) => {
                    self.pos = self.buf.len() - rest.len();
                    out.push(value);
                }
                Err(postcard::Error::DeserializeUnexpectedEnd) if !self.ended => self.fill()?,
                Err(e) => return Err(self.damaged(format!("bad payload: {e}"))),
            }
        }
        self.left -= count;
        Ok(out)
    }

    /// Reads the next piece of the file behind the undecoded bytes.
    fn fill(&mut self) -> Result<()> {
        use std::io::Read;
        self.buf.drain(..self.pos);
        self.pos = 0;
        let before = self.buf.len();
        (&mut self.file)
            .take(READ_PIECE)
            .read_to_end(&mut self.buf)
            .map_err(|e| Error::io(&self.path, e))?;
        self.ended = self.buf.len() == before;
        self.hash = crate::util::fnv1a_extend(self.hash, &self.buf[before..]);
        Ok(())
    }

    /// The error for elements that do not decode: a checksum mismatch when the file's
    /// bytes do not match its header's checksum (read to the end to tell), else `message`.
    fn damaged(&mut self, message: String) -> Error {
        if let Err(e) = self.read_to_end() {
            return e;
        }
        match self.hash == self.checksum {
            true => self.bad(message),
            false => self.bad("checksum mismatch: the file is damaged or truncated".into()),
        }
    }

    /// Reads (and hashes) the rest of the file, a piece at a time; returns how many bytes
    /// were left undecoded.
    fn read_to_end(&mut self) -> Result<usize> {
        let mut rest = self.buf.len() - self.pos;
        self.buf.clear();
        self.pos = 0;
        while !self.ended {
            self.fill()?;
            rest += self.buf.len();
            self.buf.clear();
        }
        Ok(rest)
    }

    /// Checks that every element was read, nothing follows them, and the checksum.
    pub(crate) fn finish(mut self) -> Result<()> {
        if self.left > 0 {
            return Err(self.bad(format!("{} elements were not read", self.left)));
        }
        let rest = self.read_to_end()?;
        if self.hash != self.checksum {
            return Err(self.bad("checksum mismatch: the file is damaged or truncated".into()));
        }
        if rest > 0 {
            return Err(self.bad(format!("{rest} bytes follow the elements")));
        }
        Ok(())
    }
}
