//! Fine-grained salvage of a damaged segment: find where the damage ends,
//! how many records it took, and replace it in place with a GAP frame, so
//! that every intact record after it is kept under its original sequence
//! number (sequence numbers are positional: `first_seq` + position).
//!
//! Finding the end of a damaged region (the first bad record at `at`):
//!
//! 1. **Its own length.** If the damaged record's `len` is plausible and a
//!    valid record, GAP frame (or, in a sealed segment, the footer; in an
//!    unsealed one, a footer left by a crash during sealing) starts right
//!    after it, exactly that one record was lost.
//! 2. **Scan.** Otherwise look byte by byte, from `at + 17` (a record is at
//!    least 17 bytes), for the next position where a whole record (length,
//!    CRC) or a GAP frame checks out. How many records the damage took is
//!    then unknown and comes from an *anchor*: the footer's `record_count`
//!    for a sealed segment, the next segment's `first_seq` (or a footer a
//!    crashed seal left) for an unsealed one. Several such holes in one
//!    segment are merged into one (the intact records between them cannot
//!    be numbered; they are in the quarantine copy).
//! 3. **Nothing valid after the bad point.** In an unsealed segment that is
//!    a torn tail (a group whose fdatasync never returned, so never acked):
//!    it is cut, as before. In a sealed segment the damage runs to the
//!    footer, and the anchor gives the count.
//!
//! With no anchor for a hole of unknown size, an unsealed segment is cut at
//! the hole (what recovery always did) and says so; a sealed one is
//! quarantined whole.
//!
//! In an unsealed segment, frames an earlier use of a recycled file left
//! (see [`Salt`]) end the walk the way zeros do: nothing of this use can
//! lie past them, so the scan stops there rather than reading the rest of
//! the file byte by byte.
//!
//! This module only plans; `recovery` writes the copies, frames and footers.

use std::io;

use crate::format::{
    record_crc, u32_at, u64_at, Footer, GapFrame, Salt, FOOTER_LEN, FOOTER_MARKER, GAP_FRAME_LEN,
    GAP_MARKER, RECORD_BYTES_MAX, RECORD_HEADER_LEN,
};
use crate::storage::{read_full_at, StorageFile};

/// Bytes read at a time while scanning.
const WINDOW_BYTES: usize = 1024 * 1024;
/// The smallest record on disk: a 16-byte header and a 1-byte payload. The
/// next record cannot start closer than this to a damaged one.
const MIN_RECORD_BYTES: u64 = RECORD_HEADER_LEN as u64 + 1;

/// A read-ahead window over a file, for the byte-by-byte scan.
struct Window {
    buf: Vec<u8>,
    start: u64,
    /// The window ends at the end of the file.
    at_eof: bool,
}

impl Window {
    fn new() -> Self {
        Window {
            buf: Vec::new(),
            start: 0,
            at_eof: false,
        }
    }

    /// Up to `len` bytes at `at` (fewer only at the end of the file).
    fn get<F: StorageFile>(&mut self, file: &F, at: u64, len: usize) -> io::Result<&[u8]> {
        let end = self.start + self.buf.len() as u64;
        let cached = at >= self.start && (at + len as u64 <= end || (self.at_eof && at <= end));
        if !cached {
            let want = len.max(WINDOW_BYTES);
            self.buf.resize(want, 0);
            let n = read_full_at(file, at, &mut self.buf)?;
            self.buf.truncate(n);
            self.start = at;
            self.at_eof = n < want;
        }
        let from = (at - self.start) as usize;
        let to = (from + len).min(self.buf.len());
        Ok(&self.buf[from..to])
    }
}

/// What is at an offset.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Probe {
    Record,
    Gap,
    /// A record header of 16 zero bytes.
    Zeros,
    /// Frames an earlier use of the file left (unsealed segments only).
    Stale,
    Footer(Footer),
    /// The end of the region (or only zero bytes before the end of the file).
    End,
    Bad(String),
}

/// The damaged stretch `[start, end)` of a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hole {
    pub start: u64,
    pub end: u64,
    /// Records (positions) it took; `None` until an anchor says.
    pub lost: Option<u64>,
    /// Position (from the segment's first record) of the first one lost.
    pub first_position: u64,
    /// What the first bad bytes failed.
    pub detail: String,
}

/// How the walk past the damage ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stop {
    /// Zeros, end of file or end of region at this offset.
    End(u64),
    /// A footer at this offset (unsealed segment: a crash during sealing).
    Footer(u64, Footer),
    /// Nothing valid after the bad bytes at `at`: a torn tail.
    Torn { at: u64, detail: String },
}

/// The damage in a segment, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Holes to replace with GAP frames, every `lost` known, in order.
    pub holes: Vec<Hole>,
    /// Positions (records plus lost ones) up to where the segment ends.
    pub positions: u64,
    /// Where the kept part ends and why, if it is cut there (a torn tail,
    /// or damage with no anchor to count from).
    pub cut: Option<(u64, String)>,
    /// Offset of a footer a crashed seal left (unsealed segments).
    pub footer_at: Option<u64>,
    /// Where the kept records end: the cut, the footer, or the end the
    /// walk reached.
    pub end: u64,
    /// Positions of GAP frames (an earlier salvage) the walk passed.
    pub gap_positions: u64,
    /// Where the frames an earlier use of the file left begin, if the walk
    /// found them: a torn tail's bytes end there.
    pub stale_at: Option<u64>,
}

/// Walk an unsealed (`sealed == false`) or sealed segment whose CRCs are
/// salted by `salt` from `from` (the first bad record; everything before
/// it is good and holds `positions` positions) to `region_end` (the end of
/// the file, or the footer's offset for a sealed segment), and resolve the
/// damage with `anchor`: the number of positions the segment must hold, if
/// something says so.
///
/// `Err(why)` when the damage cannot be resolved safely (the caller
/// quarantines a sealed segment).
#[allow(clippy::too_many_arguments)]
pub(crate) fn plan<F: StorageFile>(
    file: &F,
    salt: Salt,
    from: u64,
    positions: u64,
    region_end: u64,
    sealed: bool,
    anchor: Option<u64>,
) -> io::Result<Result<Plan, String>> {
    let Walk {
        holes,
        positions,
        gap_positions,
        stale_at,
        stop,
    } = walk(file, salt, from, positions, region_end, sealed)?;
    // A sealed segment's records end exactly at its footer. Bytes left
    // before it that hold no record (fewer than a GAP frame needs) cannot
    // be framed, so the segment cannot be salvaged (found by fuzzing: the
    // read-back check then failed the whole recovery).
    if let Stop::End(end) = stop {
        if sealed && end != region_end {
            return Ok(Err(format!(
                "the records end at offset {end}, {} bytes before the footer at offset \
                 {region_end}",
                region_end.saturating_sub(end)
            )));
        }
    }
    // A footer a crashed seal left counts the segment like a sealed one's.
    let anchor = match (&stop, anchor) {
        (Stop::Footer(_, f), None) => Some(f.record_count),
        (_, a) => a,
    };
    let plan = resolve(holes, positions, stop, sealed, anchor).map(|p| Plan {
        gap_positions,
        stale_at,
        ..p
    });
    // Damage that runs to a sealed segment's footer can be shorter than a
    // GAP frame (found by fuzzing: writing the frame failed the whole
    // recovery). (An unsealed segment's holes end at a frame found at least
    // a record's length on.)
    if let Ok(p) = &plan {
        if let Some(h) = p
            .holes
            .iter()
            .find(|h| h.end - h.start < GAP_FRAME_LEN as u64)
        {
            return Ok(Err(format!(
                "the damaged stretch at offset {} is {} bytes, too short for a GAP frame",
                h.start,
                h.end - h.start
            )));
        }
    }
    Ok(plan)
}

/// What a walk over a damaged region found.
struct Walk {
    /// Damaged stretches, each up to where records start again.
    holes: Vec<Hole>,
    /// Positions counted up to where the walk stopped.
    positions: u64,
    /// Positions of GAP frames (an earlier salvage) passed.
    gap_positions: u64,
    /// Where the frames an earlier use of the file left begin, if found.
    stale_at: Option<u64>,
    /// Why the walk stopped.
    stop: Stop,
}

/// Walks `file` from `from` (holding `positions` positions before it) to
/// `region_end`, passing records and GAP frames and resyncing past damage
/// (see [`plan`]).
fn walk<F: StorageFile>(
    file: &F,
    salt: Salt,
    from: u64,
    mut positions: u64,
    region_end: u64,
    sealed: bool,
) -> io::Result<Walk> {
    let mut w = Window::new();
    let mut holes: Vec<Hole> = Vec::new();
    let mut at = from;
    let mut gap_positions = 0;
    let mut stale_at = None;
    let stop = loop {
        match probe(&mut w, file, at, region_end, sealed, salt)? {
            Probe::Record => {
                let len = u32_at(w.get(file, at, 4)?, 0) as u64;
                at += RECORD_HEADER_LEN as u64 + len;
                positions += 1;
            }
            Probe::Gap => {
                let head = w.get(file, at, GAP_FRAME_LEN)?;
                let (gap, _) = GapFrame::decode(head, salt).ok_or_else(|| {
                    io::Error::other("GAP frame changed while salvaging the segment")
                })?;
                at += gap.span();
                positions += gap.lost_records as u64;
                gap_positions += gap.lost_records as u64;
            }
            Probe::End => break Stop::End(at),
            Probe::Zeros if !sealed => break Stop::End(at),
            Probe::Stale => {
                stale_at = Some(at);
                break Stop::End(at);
            }
            Probe::Footer(f) if !sealed => break Stop::Footer(at, f),
            other => {
                let detail = match other {
                    Probe::Bad(d) => d,
                    Probe::Zeros => "16 zero bytes inside a sealed segment".into(),
                    _ => "footer marker inside the records".into(),
                };
                match resync(&mut w, file, at, region_end, sealed, salt)? {
                    Next::At(next, known) => {
                        holes.push(Hole {
                            start: at,
                            end: next,
                            lost: known,
                            first_position: positions,
                            detail,
                        });
                        positions += known.unwrap_or(0);
                        at = next;
                    }
                    Next::Nothing => break Stop::Torn { at, detail },
                    Next::Stale(from) => {
                        stale_at = Some(from);
                        break Stop::Torn { at, detail };
                    }
                }
            }
        }
    };
    Ok(Walk {
        holes,
        positions,
        gap_positions,
        stale_at,
        stop,
    })
}

/// Fix the count of every hole (see the module docs).
fn resolve(
    holes: Vec<Hole>,
    positions: u64,
    stop: Stop,
    sealed: bool,
    anchor: Option<u64>,
) -> Result<Plan, String> {
    let cut = match &stop {
        Stop::Torn { at, detail } => Some((*at, detail.clone())),
        _ => None,
    };
    let footer_at = match &stop {
        Stop::Footer(at, _) => Some(*at),
        _ => None,
    };
    let end = match &stop {
        Stop::End(at) | Stop::Footer(at, _) | Stop::Torn { at, .. } => *at,
    };
    let unknown = holes.iter().any(|h| h.lost.is_none());
    // A length damaged into another plausible length can make rule 1
    // miscount; the anchor catches it. (An unsealed segment may hold more
    // positions than its anchor: records of a failed append, cut later.)
    let disagrees = match anchor {
        Some(a) if !unknown && !holes.is_empty() => {
            if sealed {
                positions != a
            } else {
                positions < a
            }
        }
        _ => false,
    };
    if !unknown && !disagrees {
        if let Some(a) = anchor.filter(|&a| sealed && a != positions) {
            return Err(format!(
                "the footer counts {a} records but the segment holds {positions}"
            ));
        }
        return Ok(Plan {
            holes,
            positions,
            cut,
            footer_at,
            end,
            gap_positions: 0,
            stale_at: None,
        });
    }
    let counted = anchor
        .ok_or_else(|| {
            "no valid footer or later segment to count the lost records from".to_string()
        })
        .and_then(|a| merge(&holes, positions, a, disagrees));
    match counted {
        Ok(merged) => Ok(Plan {
            holes: merged,
            positions: anchor.unwrap_or(positions),
            cut,
            footer_at,
            end,
            gap_positions: 0,
            stale_at: None,
        }),
        Err(why) if sealed => Err(format!("damage of unknown size: {why}")),
        // Cut at the first hole of unknown size (what recovery always did):
        // the records after it cannot be numbered. Holes before it are
        // still framed.
        Err(why) => {
            let first = holes
                .iter()
                .position(|h| disagrees || h.lost.is_none())
                .unwrap_or(0);
            let h = holes[first].clone();
            let mut kept = holes;
            kept.truncate(first);
            Ok(Plan {
                holes: kept,
                positions: h.first_position,
                cut: Some((
                    h.start,
                    format!(
                        "{}; valid records follow at offset {}, but they cannot be numbered \
                         ({why}) and are cut with it",
                        h.detail, h.end
                    ),
                )),
                footer_at: None,
                end: h.start,
                gap_positions: 0,
                stale_at: None,
            })
        }
    }
}

/// Merge the holes of unknown size (all holes, if `all`) into one, from the
/// first to the last, and give it the count the anchor leaves.
fn merge(holes: &[Hole], positions: u64, anchor: u64, all: bool) -> Result<Vec<Hole>, String> {
    let pick = |h: &Hole| all || h.lost.is_none();
    let first = holes.iter().position(pick).ok_or("no hole to count")?;
    let last = holes.iter().rposition(pick).ok_or("no hole to count")?;
    let start_pos = holes[first].first_position;
    let end_pos = holes[last].first_position + holes[last].lost.unwrap_or(0);
    // Positions counted outside the merged stretch.
    let outside = positions - (end_pos - start_pos);
    if anchor <= outside {
        return Err(format!(
            "the anchor says {anchor} records, but {outside} are counted outside the damage"
        ));
    }
    let lost = anchor - outside;
    let mut out = holes.to_vec();
    // Holes after the merged one move by what it now counts.
    for h in &mut out[last + 1..] {
        h.first_position = h.first_position - (end_pos - start_pos) + lost;
    }
    let merged = Hole {
        start: holes[first].start,
        end: holes[last].end,
        lost: Some(lost),
        first_position: start_pos,
        detail: holes[first].detail.clone(),
    };
    out.splice(first..=last, [merged]);
    Ok(out)
}

/// Where the damaged record at `at` ends (see [`resync`]).
enum Next {
    /// At this offset a good frame starts; the records lost, if known.
    At(u64, Option<u64>),
    /// Nothing valid follows (unsealed only).
    Nothing,
    /// Nothing of this use follows: an earlier use's frames start here
    /// (unsealed only).
    Stale(u64),
}

/// Where the damaged record at `at` ends.
fn resync<F: StorageFile>(
    w: &mut Window,
    file: &F,
    at: u64,
    region_end: u64,
    sealed: bool,
    salt: Salt,
) -> io::Result<Next> {
    // 1. The damaged record's own length.
    let head = w.get(file, at, RECORD_HEADER_LEN)?;
    if head.len() == RECORD_HEADER_LEN {
        let len = u32_at(head, 0) as u64;
        let next = at + RECORD_HEADER_LEN as u64 + len;
        if (1..=RECORD_BYTES_MAX as u64).contains(&len) && next <= region_end {
            let ok = match probe(w, file, next, region_end, sealed, salt)? {
                Probe::Record | Probe::Gap => true,
                Probe::End => sealed && next == region_end,
                Probe::Footer(_) => !sealed,
                Probe::Stale => return Ok(Next::Stale(next)),
                _ => false,
            };
            if ok {
                return Ok(Next::At(next, Some(1)));
            }
        }
    }
    // 2. Scan for the next frame that checks out.
    let mut p = at + MIN_RECORD_BYTES;
    while p + RECORD_HEADER_LEN as u64 <= region_end {
        // Skip zeros fast: a candidate's length (bytes p..p+4) is non-zero.
        let chunk = w.get(file, p, WINDOW_BYTES)?;
        match chunk.iter().position(|&b| b != 0) {
            None if chunk.is_empty() => break,
            None => {
                p += chunk.len() as u64;
                continue;
            }
            Some(q) if q > 3 => {
                p += q as u64 - 3;
                continue;
            }
            Some(_) => {}
        }
        let head = w.get(file, p, 4)?;
        if head.len() < 4 {
            break;
        }
        let len = u32_at(head, 0) as u64;
        let plausible = len == GAP_MARKER as u64
            || (!sealed && len == FOOTER_MARKER as u64)
            || ((1..=RECORD_BYTES_MAX as u64).contains(&len)
                && p + RECORD_HEADER_LEN as u64 + len <= region_end);
        if plausible {
            match probe(w, file, p, region_end, sealed, salt)? {
                Probe::Record | Probe::Gap => return Ok(Next::At(p, None)),
                Probe::Footer(_) if !sealed => return Ok(Next::At(p, None)),
                Probe::Stale => return Ok(Next::Stale(p)),
                _ => {}
            }
        }
        p += 1;
    }
    // 3. Nothing: a sealed segment's damage runs to its footer.
    if sealed {
        return Ok(Next::At(region_end, None));
    }
    Ok(Next::Nothing)
}

/// What is at `at` (nothing is read at or past `region_end`), CRCs
/// checked under `salt`.
fn probe<F: StorageFile>(
    w: &mut Window,
    file: &F,
    at: u64,
    region_end: u64,
    sealed: bool,
    salt: Salt,
) -> io::Result<Probe> {
    let found = probe_frame(w, file, at, region_end, sealed, salt)?;
    if matches!(found, Probe::Bad(_)) && !sealed && stale(w, file, at, region_end, salt)? {
        return Ok(Probe::Stale);
    }
    Ok(found)
}

/// [`probe`], not asking whether a bad frame is an earlier use's.
fn probe_frame<F: StorageFile>(
    w: &mut Window,
    file: &F,
    at: u64,
    region_end: u64,
    sealed: bool,
    salt: Salt,
) -> io::Result<Probe> {
    if at >= region_end {
        return Ok(Probe::End);
    }
    let avail = (region_end - at).min(RECORD_HEADER_LEN as u64) as usize;
    let head = w.get(file, at, avail)?;
    if head.len() < RECORD_HEADER_LEN {
        if head.iter().all(|&b| b == 0) {
            return Ok(Probe::End);
        }
        return Ok(Probe::Bad(format!(
            "file ends {} bytes into a record header (torn write)",
            head.len()
        )));
    }
    let len = u32_at(head, 0);
    if len == 0 {
        if head.iter().all(|&b| b == 0) {
            return Ok(Probe::Zeros);
        }
        return Ok(Probe::Bad(
            "record length 0 with non-zero header bytes".into(),
        ));
    }
    if len == GAP_MARKER {
        return Ok(match GapFrame::decode(head, salt) {
            Some((g, _)) if at + g.span() <= region_end => Probe::Gap,
            Some(_) => Probe::Bad("GAP frame skips past the end".into()),
            None => Probe::Bad("GAP frame fails its CRC".into()),
        });
    }
    if len == FOOTER_MARKER {
        if sealed || at + FOOTER_LEN as u64 > region_end {
            return Ok(Probe::Bad("footer marker inside the records".into()));
        }
        let raw = w.get(file, at, FOOTER_LEN)?;
        let raw: &[u8; FOOTER_LEN] = raw
            .try_into()
            .map_err(|_| io::Error::other("short read of a footer"))?;
        return Ok(match Footer::decode(raw, salt) {
            Ok(f) if f.end_offset == at => Probe::Footer(f),
            Ok(_) => Probe::Bad("footer at the wrong offset".into()),
            Err(e) => Probe::Bad(e.to_string()),
        });
    }
    if len > RECORD_BYTES_MAX {
        return Ok(Probe::Bad(format!(
            "record length {len} exceeds the {RECORD_BYTES_MAX}-byte maximum"
        )));
    }
    let total = RECORD_HEADER_LEN + len as usize;
    if at + total as u64 > region_end {
        return Ok(Probe::Bad(format!(
            "record of {len} bytes runs past the end (torn write)"
        )));
    }
    let whole = w.get(file, at, total)?;
    if whole.len() < total {
        return Ok(Probe::Bad(format!(
            "record of {len} bytes runs past the end of the file (torn write)"
        )));
    }
    let stored = u32_at(whole, 4);
    let computed = salt.apply(record_crc(u64_at(whole, 8), &whole[RECORD_HEADER_LEN..]));
    if stored != computed {
        return Ok(Probe::Bad(format!(
            "record CRC mismatch (stored {stored:#010x}, computed {computed:#010x})"
        )));
    }
    Ok(Probe::Record)
}

/// Records whose own length and CRC check out, from `from` to the end of
/// the file, stepping over damage the way [`plan`] does (a GAP frame counts
/// none): what a file whose records cannot be numbered still holds. Its
/// header cannot say its format: its records are counted under this
/// build's salt for `segment_id`, or under format 1's if none checks out
/// that way (as [`crate::damaged_header`] reads them). Not the larger
/// count: in a file recycled from a format-1 segment, the old records
/// past the new ones check out under format 1.
pub(crate) fn count_intact<F: StorageFile>(
    file: &F,
    from: u64,
    segment_id: u64,
) -> io::Result<u64> {
    for salt in Salt::candidates(segment_id) {
        let records = count_intact_under(file, from, salt)?;
        if records > 0 {
            return Ok(records);
        }
    }
    Ok(0)
}

fn count_intact_under<F: StorageFile>(file: &F, from: u64, salt: Salt) -> io::Result<u64> {
    let region_end = file.len()?;
    let mut w = Window::new();
    let mut at = from;
    let mut records = 0;
    loop {
        match probe(&mut w, file, at, region_end, false, salt)? {
            Probe::Record => {
                let len = u32_at(w.get(file, at, 4)?, 0) as u64;
                at += RECORD_HEADER_LEN as u64 + len;
                records += 1;
            }
            Probe::Gap => {
                let head = w.get(file, at, GAP_FRAME_LEN)?;
                let (gap, _) = GapFrame::decode(head, salt)
                    .ok_or_else(|| io::Error::other("GAP frame changed while counting records"))?;
                at += gap.span();
            }
            Probe::End | Probe::Zeros | Probe::Stale | Probe::Footer(_) => return Ok(records),
            Probe::Bad(_) => match resync(&mut w, file, at, region_end, false, salt)? {
                Next::At(next, _) => at = next,
                Next::Nothing | Next::Stale(_) => return Ok(records),
            },
        }
    }
}

/// Whether the frame at `at` (which failed its check under `salt`) was left
/// by an earlier use of a recycled file: see [`stale`].
pub(crate) fn left_by_earlier_use<F: StorageFile>(
    file: &F,
    at: u64,
    region_end: u64,
    salt: Salt,
) -> io::Result<bool> {
    stale(&mut Window::new(), file, at, region_end, salt)
}

/// Whether the frame at `at` checks out under a salt `salt` calls earlier
/// ([`Salt::is_earlier`]), and what follows it is the same earlier use's
/// too: its next frame under the same salt, zeros, or the end. One frame
/// that damage made look like an earlier use's is possible (odds of about
/// the segment id in 2^32); two in a row, or one followed by the end, is
/// what a recycled file shows past its new records.
fn stale<F: StorageFile>(
    w: &mut Window,
    file: &F,
    at: u64,
    region_end: u64,
    salt: Salt,
) -> io::Result<bool> {
    let Some((found, next)) = frame_salt(w, file, at, region_end)? else {
        return Ok(false);
    };
    if !salt.is_earlier(found) {
        return Ok(false);
    }
    let Some(next) = next else {
        // The earlier use's footer: its end.
        return Ok(true);
    };
    let head = w.get(file, next, RECORD_HEADER_LEN)?;
    if next >= region_end || head.iter().all(|&b| b == 0) {
        return Ok(true);
    }
    Ok(matches!(frame_salt(w, file, next, region_end)?, Some((f, _)) if f == found))
}

/// The salt a whole, well-formed frame at `at` was written under (stored
/// CRC xor the CRC of its content), and where the frame after it starts
/// (`None` for a footer). `None` if no frame is whole there.
fn frame_salt<F: StorageFile>(
    w: &mut Window,
    file: &F,
    at: u64,
    region_end: u64,
) -> io::Result<Option<(Salt, Option<u64>)>> {
    let head = w.get(file, at, RECORD_HEADER_LEN)?;
    if head.len() < RECORD_HEADER_LEN || at + RECORD_HEADER_LEN as u64 > region_end {
        return Ok(None);
    }
    let len = u32_at(head, 0);
    let stored = u32_at(head, 4);
    if len == GAP_MARKER {
        let computed = crc32fast::hash(&head[8..16]);
        let span = GAP_FRAME_LEN as u64 + u32_at(head, 8) as u64;
        return Ok(Some((Salt::found(stored, computed), Some(at + span))));
    }
    if len == FOOTER_MARKER {
        let raw = w.get(file, at, FOOTER_LEN)?;
        if raw.len() < FOOTER_LEN || raw[4..8] != crate::format::FOOTER_MAGIC {
            return Ok(None);
        }
        let computed = crc32fast::hash(&raw[0..36]);
        return Ok(Some((Salt::found(u32_at(raw, 36), computed), None)));
    }
    if len == 0 || len > RECORD_BYTES_MAX {
        return Ok(None);
    }
    let total = RECORD_HEADER_LEN + len as usize;
    if at + total as u64 > region_end {
        return Ok(None);
    }
    let whole = w.get(file, at, total)?;
    if whole.len() < total {
        return Ok(None);
    }
    let computed = record_crc(u64_at(whole, 8), &whole[RECORD_HEADER_LEN..]);
    Ok(Some((
        Salt::found(stored, computed),
        Some(at + total as u64),
    )))
}

/// Whether the 40 bytes at the end of a sealed file look like its footer
/// (marker or magic intact: one damaged byte cannot break both) although
/// the footer fails its check.
pub(crate) fn footer_like(raw: &[u8; FOOTER_LEN]) -> bool {
    u32_at(raw, 0) == FOOTER_MARKER || raw[4..8] == crate::format::FOOTER_MAGIC
}
