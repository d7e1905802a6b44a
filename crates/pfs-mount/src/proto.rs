//! The client side of a mount session (docs/wire.md §12), sans-I/O: the
//! caller hands it whole frames and takes frame bytes to send; no sockets,
//! no clocks, no threads.
//!
//! [`Opening`] runs MOUNT_HELLO → MOUNT_ACCEPT → LIST into a [`Tree`].
//! [`Requests`] then encodes RECIPE_ASK and FETCH and checks every answer
//! against what was asked: the server answers in order, so the oldest
//! request outstanding is the one a reply must belong to. Every chunk is
//! checked against the hash its recipe gave before it is handed on; a
//! reply that breaks a rule ends the session ([`ProtoError`]).

use std::collections::VecDeque;

use pfs_wire::control::ErrorFrame;
use pfs_wire::frame::FrameType;
use pfs_wire::mount::{
    parse_data, parse_list, parse_recipe, DataEntry, FetchRun, Hash, MountAccept, MountHello, RecipeAsk,
    ReqHead, ServeStatus, FETCH_HEAD_LEN, FETCH_RUN_LEN, FLAG_LAST,
};
use pfs_wire::{put_frame, WireError};

use crate::tree::{Tree, TreeError};

/// A rule of §12 the server broke, or its ERROR.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// A frame that does not decode.
    #[error("{frame} from the server does not decode: {error}")]
    Wire {
        /// Frame name.
        frame: &'static str,
        /// Why.
        error: WireError,
    },
    /// The server refused or ended the session (ERROR, §4.5).
    #[error("the server says: {message}")]
    Server {
        /// Its code (`pfs_wire::ErrorCode` number).
        code: u16,
        /// Its message.
        message: String,
    },
    /// A frame the session state does not allow, or one that contradicts
    /// the request it answers.
    #[error("protocol: {0}")]
    Protocol(#[from] Breach),
    /// The listing breaks a rule (paths, order, count).
    #[error("listing: {0}")]
    Tree(#[from] TreeError),
    /// A chunk whose bytes do not match its hash.
    #[error("chunk {index} of {entry_desc} does not match its hash: the server sent wrong bytes")]
    BadChunk {
        /// Which file, for the message.
        entry_desc: String,
        /// Chunk index in the file.
        index: u32,
    },
}

/// What a frame did that the session state or the request it answers
/// does not allow ([`ProtoError::Protocol`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Breach {
    /// MOUNT_ACCEPT announces more entries than MOUNT_HELLO allowed.
    #[error("the server lists {listed} entries; at most {asked} were asked for")]
    TooManyEntries {
        /// Entries announced.
        listed: u64,
        /// Most asked for.
        asked: u32,
    },
    /// MOUNT_ACCEPT announces larger DATA bodies than MOUNT_HELLO allowed.
    #[error("DATA bodies of {announced} bytes announced; at most {asked} were asked for")]
    DataBodyTooLarge {
        /// Body size announced.
        announced: u32,
        /// Largest asked for.
        asked: u32,
    },
    /// LIST came before MOUNT_ACCEPT.
    #[error("LIST before MOUNT_ACCEPT")]
    ListBeforeAccept,
    /// LIST entries beyond the count announced.
    #[error("more than the {announced} entries announced")]
    ListBeyondAnnounced {
        /// Entries announced.
        announced: u64,
    },
    /// The last LIST ended with fewer entries than announced.
    #[error("{listed} entries listed, {announced} announced")]
    ListShort {
        /// Entries listed.
        listed: u64,
        /// Entries announced.
        announced: u64,
    },
    /// A frame type the opening does not allow.
    #[error("{} while opening the session", .0.name())]
    WhileOpening(FrameType),
    /// A frame type the session does not allow after the opening.
    #[error("{} during the session", .0.name())]
    DuringSession(FrameType),
    /// An answer to a request that is not the oldest outstanding.
    #[error("{what} answers request {req}, but request {oldest} is the oldest outstanding")]
    OutOfOrder {
        /// The answer's frame name.
        what: &'static str,
        /// The request it names.
        req: u32,
        /// The oldest outstanding request.
        oldest: u32,
    },
    /// An answer while no request is outstanding.
    #[error("{what} for request {req}, none outstanding")]
    NoneOutstanding {
        /// The answer's frame name.
        what: &'static str,
        /// The request it names.
        req: u32,
    },
    /// RECIPE answering a FETCH.
    #[error("RECIPE answers FETCH request {0}")]
    RecipeForFetch(u32),
    /// RECIPE with status GONE but not flagged LAST.
    #[error("RECIPE GONE without LAST")]
    RecipeGoneNotLast,
    /// A RECIPE part that does not continue where the last one ended.
    #[error("RECIPE part starts at chunk {first}, {before} came before")]
    RecipeGap {
        /// Its first chunk.
        first: u64,
        /// Chunks received before it.
        before: u64,
    },
    /// A recipe chunk larger than the server's largest.
    #[error("a chunk of {len} bytes; the server's largest is {max}")]
    ChunkTooLarge {
        /// Its length.
        len: u32,
        /// The largest the server announced (4 × its average).
        max: u32,
    },
    /// A recipe describing more bytes than its file has.
    #[error("the recipe of entry {entry} describes more than its {size} bytes")]
    RecipeTooLong {
        /// The entry.
        entry: u64,
        /// Its size.
        size: u64,
    },
    /// A recipe with more chunks than its size allows.
    #[error("the recipe of entry {entry} has more than the {most} chunks its {size} bytes allow")]
    RecipeTooManyChunks {
        /// The entry.
        entry: u64,
        /// Most chunks its size allows.
        most: u64,
        /// Its size.
        size: u64,
    },
    /// A complete recipe describing fewer bytes than its file has.
    #[error("the recipe of entry {entry} describes {described} of its {size} bytes")]
    RecipeShort {
        /// The entry.
        entry: u64,
        /// Bytes described.
        described: u64,
        /// Its size.
        size: u64,
    },
    /// DATA answering a RECIPE_ASK.
    #[error("DATA answers RECIPE_ASK request {0}")]
    DataForRecipe(u32),
    /// DATA with more chunks than the FETCH asked.
    #[error("DATA holds more chunks than were asked")]
    DataTooMany,
    /// The last DATA of a FETCH without every chunk asked.
    #[error("DATA ended with {0} chunks asked and not sent")]
    DataShort(usize),
}

fn wire(frame: &'static str) -> impl Fn(WireError) -> ProtoError {
    move |error| ProtoError::Wire { frame, error }
}

fn server_error(body: &[u8]) -> ProtoError {
    match ErrorFrame::parse(body) {
        Ok(e) => ProtoError::Server {
            code: e.code,
            message: e.message.to_string(),
        },
        Err(e) => ProtoError::Wire {
            frame: "ERROR",
            error: e,
        },
    }
}

/// What the client announces in MOUNT_HELLO.
#[derive(Debug, Clone)]
pub struct HelloParams {
    /// Directory below what the key may read.
    pub dir: Vec<u8>,
    /// Most listing entries taken.
    pub max_entries: u32,
    /// Largest DATA body taken.
    pub max_data_body: u32,
    /// Random, for logs.
    pub session_nonce: u64,
}

/// MOUNT_HELLO, then the listing.
#[derive(Debug)]
pub struct Opening {
    params: HelloParams,
    accept: Option<MountAccept>,
    tree: Option<Tree>,
    digest: blake3::Hasher,
}

/// A session whose listing is complete.
#[derive(Debug)]
pub struct Opened {
    /// What the server announced.
    pub accept: MountAccept,
    /// The tree.
    pub tree: Tree,
    /// BLAKE3 of MOUNT_ACCEPT and every LIST body: a reconnection must
    /// find the same tree to go on under the same inode numbers.
    pub digest: [u8; 32],
}

impl Opening {
    /// Starts a session; `out` receives the MOUNT_HELLO frame.
    pub fn new(params: HelloParams, out: &mut Vec<u8>) -> Self {
        let hello = MountHello {
            max_entries: params.max_entries,
            max_data_body: params.max_data_body,
            session_nonce: params.session_nonce,
            dir: &params.dir,
        };
        put_frame(out, FrameType::MountHello, 0, &hello.emit());
        Self {
            params,
            accept: None,
            tree: None,
            digest: blake3::Hasher::new(),
        }
    }

    /// Takes one frame; `Some` once the listing is complete.
    pub fn on_frame(&mut self, t: FrameType, flags: u16, body: &[u8]) -> Result<Option<Opened>, ProtoError> {
        match (t, &self.accept) {
            (FrameType::Error, _) => Err(server_error(body)),
            (FrameType::MountAccept, None) => {
                let a = MountAccept::parse(body).map_err(wire("MOUNT_ACCEPT"))?;
                if a.entries > u64::from(self.params.max_entries) {
                    return Err(Breach::TooManyEntries {
                        listed: a.entries,
                        asked: self.params.max_entries,
                    }
                    .into());
                }
                if a.max_data_body > self.params.max_data_body {
                    return Err(Breach::DataBodyTooLarge {
                        announced: a.max_data_body,
                        asked: self.params.max_data_body,
                    }
                    .into());
                }
                self.tree = Some(Tree::new(a.root_mode, a.root_mtime_sec, a.root_mtime_nsec));
                self.accept = Some(a);
                self.digest.update(body);
                Ok(None)
            }
            (FrameType::List, Some(a)) => {
                let a = *a;
                self.digest.update(body);
                let tree = self
                    .tree
                    .as_mut()
                    .ok_or(ProtoError::Protocol(Breach::ListBeforeAccept))?;
                for e in parse_list(body) {
                    let e = e.map_err(wire("LIST"))?;
                    if tree.entries() >= a.entries {
                        return Err(Breach::ListBeyondAnnounced { announced: a.entries }.into());
                    }
                    tree.push(&e)?;
                }
                if flags & FLAG_LAST == 0 {
                    return Ok(None);
                }
                if tree.entries() != a.entries {
                    return Err(Breach::ListShort {
                        listed: tree.entries(),
                        announced: a.entries,
                    }
                    .into());
                }
                let tree = self.tree.take().unwrap_or_default();
                Ok(Some(Opened {
                    accept: a,
                    tree,
                    digest: *self.digest.finalize().as_bytes(),
                }))
            }
            (other, _) => Err(Breach::WhileOpening(other).into()),
        }
    }
}

/// One chunk asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Want {
    /// File's listing entry.
    pub entry: u64,
    /// Chunk index in its recipe.
    pub index: u32,
    /// Length the recipe gave.
    pub len: u32,
    /// Hash the recipe gave.
    pub hash: Hash,
}

/// What an answer brought.
#[derive(Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// More of a recipe: entries from chunk `first`; `last` ends it.
    RecipePart {
        /// File's listing entry.
        entry: u64,
        /// Index of the first chunk here.
        first: u64,
        /// `(len, hash)` of each chunk.
        chunks: Vec<(u32, Hash)>,
        /// The recipe is complete.
        last: bool,
    },
    /// The file cannot be served any more (changed or gone on the server).
    RecipeGone {
        /// File's listing entry.
        entry: u64,
    },
    /// A chunk that matched its hash.
    Chunk {
        /// What was asked.
        want: Want,
        /// Its bytes, checked.
        bytes: &'a [u8],
    },
    /// A chunk the server could not serve.
    ChunkGone {
        /// What was asked.
        want: Want,
    },
}

#[derive(Debug)]
enum Pending {
    Recipe {
        entry: u64,
        size: u64,
        chunks: u64,
        bytes: u64,
    },
    Fetch {
        wants: VecDeque<Want>,
    },
}

/// The requests outstanding on an open session, and the checks of their
/// answers.
#[derive(Debug)]
pub struct Requests {
    next_req: u32,
    pending: VecDeque<(u32, Pending)>,
    max_chunk: u32,
    min_chunk: u32,
    max_fetch: u32,
}

impl Requests {
    /// For a session the server opened with `accept`.
    pub fn new(accept: &MountAccept) -> Self {
        Self {
            next_req: 1,
            pending: VecDeque::new(),
            max_chunk: accept.chunk_avg.saturating_mul(4),
            min_chunk: (accept.chunk_avg / 4).max(1),
            max_fetch: accept.max_fetch_chunks,
        }
    }

    /// Most chunks one FETCH may ask for.
    pub fn max_fetch(&self) -> u32 {
        self.max_fetch
    }

    /// Requests not fully answered.
    pub fn outstanding(&self) -> usize {
        self.pending.len()
    }

    fn take_req(&mut self) -> u32 {
        let r = self.next_req;
        self.next_req = self.next_req.wrapping_add(1);
        r
    }

    /// Asks for the recipe of file `entry` of `size` bytes.
    pub fn ask_recipe(&mut self, entry: u64, size: u64, out: &mut Vec<u8>) {
        let req = self.take_req();
        put_frame(out, FrameType::RecipeAsk, 0, &RecipeAsk { req, entry }.emit());
        self.pending.push_back((
            req,
            Pending::Recipe {
                entry,
                size,
                chunks: 0,
                bytes: 0,
            },
        ));
    }

    /// Asks for `wants` (at most [`Self::max_fetch`]; consecutive chunks of
    /// one file go as one run).
    pub fn fetch(&mut self, wants: &[Want], out: &mut Vec<u8>) {
        debug_assert!(!wants.is_empty() && wants.len() <= self.max_fetch as usize);
        let req = self.take_req();
        let mut runs: Vec<FetchRun> = Vec::new();
        for w in wants {
            match runs.last_mut() {
                Some(r) if r.entry == w.entry && r.first.checked_add(r.count) == Some(w.index) => {
                    r.count += 1
                }
                _ => runs.push(FetchRun {
                    entry: w.entry,
                    first: w.index,
                    count: 1,
                }),
            }
        }
        let mut body = Vec::with_capacity(FETCH_HEAD_LEN + runs.len() * FETCH_RUN_LEN);
        body.extend_from_slice(
            &ReqHead {
                req,
                count: runs.len() as u32,
            }
            .emit(),
        );
        runs.iter().for_each(|r| r.emit_into(&mut body));
        put_frame(out, FrameType::Fetch, 0, &body);
        self.pending.push_back((
            req,
            Pending::Fetch {
                wants: wants.iter().copied().collect(),
            },
        ));
    }

    /// Takes one frame of an answer, handing what it brought to `event`.
    /// `desc` names a file in messages.
    pub fn on_frame<'b>(
        &mut self,
        t: FrameType,
        flags: u16,
        body: &'b [u8],
        desc: &dyn Fn(u64) -> String,
        event: &mut dyn FnMut(Event<'b>),
    ) -> Result<(), ProtoError> {
        let last = flags & FLAG_LAST != 0;
        match t {
            FrameType::Error => Err(server_error(body)),
            FrameType::Recipe => self.recipe(body, last, event),
            FrameType::Data => self.data(body, last, desc, event),
            other => Err(Breach::DuringSession(other).into()),
        }
    }

    fn front(&mut self, req: u32, what: &'static str) -> Result<&mut Pending, ProtoError> {
        match self.pending.front_mut() {
            Some((r, p)) if *r == req => Ok(p),
            Some((r, _)) => Err(Breach::OutOfOrder {
                what,
                req,
                oldest: *r,
            }
            .into()),
            None => Err(Breach::NoneOutstanding { what, req }.into()),
        }
    }

    fn recipe<'b>(
        &mut self,
        body: &'b [u8],
        last: bool,
        event: &mut dyn FnMut(Event<'b>),
    ) -> Result<(), ProtoError> {
        let (head, entries) = parse_recipe(body).map_err(wire("RECIPE"))?;
        let max_chunk = self.max_chunk;
        let min_chunk = u64::from(self.min_chunk);
        let Pending::Recipe {
            entry,
            size,
            chunks,
            bytes,
        } = self.front(head.req, "RECIPE")?
        else {
            return Err(Breach::RecipeForFetch(head.req).into());
        };
        let entry = *entry;
        if head.status == ServeStatus::Gone {
            if !last {
                return Err(Breach::RecipeGoneNotLast.into());
            }
            self.pending.pop_front();
            event(Event::RecipeGone { entry });
            return Ok(());
        }
        if head.first != *chunks {
            return Err(Breach::RecipeGap {
                first: head.first,
                before: *chunks,
            }
            .into());
        }
        let mut got = Vec::with_capacity(entries.len());
        for (len, hash) in entries {
            if len > max_chunk {
                return Err(Breach::ChunkTooLarge { len, max: max_chunk }.into());
            }
            *bytes += u64::from(len);
            if *bytes > *size {
                return Err(Breach::RecipeTooLong { entry, size: *size }.into());
            }
            got.push((len, *hash));
        }
        *chunks += got.len() as u64;
        // Every chunk but the last is at least the minimum (§12.7): more
        // entries than that allows are a server inflating the recipe.
        let most = (*size / min_chunk + 1).min(u64::from(u32::MAX));
        if *chunks > most {
            return Err(Breach::RecipeTooManyChunks {
                entry,
                most,
                size: *size,
            }
            .into());
        }
        if last && *bytes != *size {
            return Err(Breach::RecipeShort {
                entry,
                described: *bytes,
                size: *size,
            }
            .into());
        }
        let first = head.first;
        if last {
            self.pending.pop_front();
        }
        event(Event::RecipePart {
            entry,
            first,
            chunks: got,
            last,
        });
        Ok(())
    }

    fn data<'b>(
        &mut self,
        body: &'b [u8],
        last: bool,
        desc: &dyn Fn(u64) -> String,
        event: &mut dyn FnMut(Event<'b>),
    ) -> Result<(), ProtoError> {
        let (head, entries) = parse_data(body).map_err(wire("DATA"))?;
        let Pending::Fetch { wants } = self.front(head.req, "DATA")? else {
            return Err(Breach::DataForRecipe(head.req).into());
        };
        for e in entries {
            let e = e.map_err(wire("DATA"))?;
            let want = wants
                .pop_front()
                .ok_or(ProtoError::Protocol(Breach::DataTooMany))?;
            match e {
                DataEntry::Gone => event(Event::ChunkGone { want }),
                DataEntry::Bytes(b) => {
                    if b.len() != want.len as usize || blake3::hash(b).as_bytes() != &want.hash {
                        return Err(ProtoError::BadChunk {
                            entry_desc: desc(want.entry),
                            index: want.index,
                        });
                    }
                    event(Event::Chunk { want, bytes: b });
                }
            }
        }
        if last {
            if !wants.is_empty() {
                return Err(Breach::DataShort(wants.len()).into());
            }
            self.pending.pop_front();
        }
        Ok(())
    }

    /// Everything still asked, to fail its waiters when the session ends.
    pub fn abandon(&mut self) -> (Vec<u64>, Vec<Want>) {
        let mut recipes = Vec::new();
        let mut chunks = Vec::new();
        for (_, p) in self.pending.drain(..) {
            match p {
                Pending::Recipe { entry, .. } => recipes.push(entry),
                Pending::Fetch { wants, .. } => chunks.extend(wants),
            }
        }
        (recipes, chunks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pfs_wire::frame::Frame;
    use pfs_wire::mount::{emit_recipe_entry, ListEntry, ListKind, RecipeHead};

    fn accept(entries: u64) -> MountAccept {
        MountAccept {
            entries,
            chunk_avg: 256,
            max_fetch_chunks: 8,
            max_data_body: 1 << 20,
            root_mode: 0o755,
            root_mtime_sec: 0,
            root_mtime_nsec: 0,
        }
    }

    fn opened() -> Opened {
        let mut out = Vec::new();
        let mut o = Opening::new(
            HelloParams {
                dir: Vec::new(),
                max_entries: 10,
                max_data_body: 1 << 20,
                session_nonce: 1,
            },
            &mut out,
        );
        let (f, _) = Frame::parse(&out).unwrap();
        assert_eq!(f.header.frame_type, FrameType::MountHello);
        assert!(o
            .on_frame(FrameType::MountAccept, 0, &accept(1).emit())
            .unwrap()
            .is_none());
        let mut list = Vec::new();
        ListEntry {
            kind: ListKind::File,
            mode: 0o644,
            mtime_sec: 0,
            mtime_nsec: 0,
            size: 5,
            path: b"f",
            link: b"",
        }
        .emit_into(&mut list);
        o.on_frame(FrameType::List, FLAG_LAST, &list)
            .unwrap()
            .expect("opened")
    }

    fn recipe(req: u32, first: u64, chunks: &[(u32, Hash)]) -> Vec<u8> {
        let mut b = RecipeHead {
            req,
            status: ServeStatus::Ok,
            first,
            count: chunks.len() as u32,
        }
        .emit()
        .to_vec();
        chunks.iter().for_each(|(l, h)| emit_recipe_entry(&mut b, *l, h));
        b
    }

    #[test]
    fn listing_count_must_match() {
        let mut out = Vec::new();
        let mut o = Opening::new(
            HelloParams {
                dir: Vec::new(),
                max_entries: 10,
                max_data_body: 1 << 20,
                session_nonce: 1,
            },
            &mut out,
        );
        o.on_frame(FrameType::MountAccept, 0, &accept(2).emit()).unwrap();
        assert!(matches!(
            o.on_frame(FrameType::List, FLAG_LAST, &[]),
            Err(ProtoError::Protocol(_))
        ));
        let mut o2 = Opening::new(
            HelloParams {
                dir: Vec::new(),
                max_entries: 1,
                max_data_body: 1 << 20,
                session_nonce: 1,
            },
            &mut out,
        );
        assert!(o2.on_frame(FrameType::MountAccept, 0, &accept(2).emit()).is_err());
    }

    /// Chunks of a few bytes, so a 5-byte file may have two.
    fn tiny_chunks(a: &MountAccept) -> MountAccept {
        MountAccept { chunk_avg: 8, ..*a }
    }

    #[test]
    fn recipes_and_chunks_are_checked() {
        let o = opened();
        let mut r = Requests::new(&tiny_chunks(&o.accept));
        let mut out = Vec::new();
        r.ask_recipe(0, 5, &mut out);
        let h2 = *blake3::hash(b"cde").as_bytes();
        let h1 = *blake3::hash(b"ab").as_bytes();
        let desc = |e: u64| format!("entry {e}");
        let mut events = Vec::new();
        // Beyond the size: refused.
        assert!(r
            .on_frame(
                FrameType::Recipe,
                FLAG_LAST,
                &recipe(1, 0, &[(6, h1)]),
                &desc,
                &mut |_| ()
            )
            .is_err());
        let mut r = Requests::new(&tiny_chunks(&o.accept));
        r.ask_recipe(0, 5, &mut out);
        r.on_frame(FrameType::Recipe, 0, &recipe(1, 0, &[(2, h1)]), &desc, &mut |e| {
            events.push(format!("{e:?}"))
        })
        .unwrap();
        // A part that does not continue: refused.
        assert!(r
            .on_frame(
                FrameType::Recipe,
                FLAG_LAST,
                &recipe(1, 0, &[(3, h2)]),
                &desc,
                &mut |_| ()
            )
            .is_err());
        let mut r = Requests::new(&tiny_chunks(&o.accept));
        r.ask_recipe(0, 5, &mut out);
        r.on_frame(
            FrameType::Recipe,
            0,
            &recipe(1, 0, &[(2, h1)]),
            &desc,
            &mut |_| (),
        )
        .unwrap();
        r.on_frame(
            FrameType::Recipe,
            FLAG_LAST,
            &recipe(1, 1, &[(3, h2)]),
            &desc,
            &mut |_| (),
        )
        .unwrap();
        assert_eq!(r.outstanding(), 0);

        let wants = [
            Want {
                entry: 0,
                index: 0,
                len: 2,
                hash: h1,
            },
            Want {
                entry: 0,
                index: 1,
                len: 3,
                hash: h2,
            },
        ];
        r.fetch(&wants, &mut out);
        let mut data = ReqHead { req: 2, count: 2 }.emit().to_vec();
        DataEntry::emit_bytes_head(&mut data, 2);
        data.extend_from_slice(b"ab");
        DataEntry::emit_bytes_head(&mut data, 3);
        data.extend_from_slice(b"cdX");
        let err = r.on_frame(FrameType::Data, FLAG_LAST, &data, &desc, &mut |_| ());
        assert!(matches!(err, Err(ProtoError::BadChunk { index: 1, .. })));

        let mut r = Requests::new(&tiny_chunks(&o.accept));
        r.fetch(&wants, &mut out);
        let mut data = ReqHead { req: 1, count: 1 }.emit().to_vec();
        DataEntry::emit_bytes_head(&mut data, 2);
        data.extend_from_slice(b"ab");
        // LAST with a chunk missing.
        assert!(r
            .on_frame(FrameType::Data, FLAG_LAST, &data, &desc, &mut |_| ())
            .is_err());
        let mut r = Requests::new(&tiny_chunks(&o.accept));
        r.fetch(&wants, &mut out);
        let mut got = 0;
        r.on_frame(FrameType::Data, 0, &data, &desc, &mut |_| got += 1)
            .unwrap();
        let mut data2 = ReqHead { req: 1, count: 1 }.emit().to_vec();
        DataEntry::emit_gone(&mut data2);
        r.on_frame(FrameType::Data, FLAG_LAST, &data2, &desc, &mut |e| {
            assert!(matches!(e, Event::ChunkGone { .. }))
        })
        .unwrap();
        assert_eq!((got, r.outstanding()), (1, 0));
        // An answer to nothing.
        assert!(r
            .on_frame(FrameType::Data, FLAG_LAST, &data2, &desc, &mut |_| ())
            .is_err());
    }
}
