//! A reader that cuts every line longer than a maximum, so that a parser reading through it
//! (the csv crate) never holds more than that of one line, whatever the input.
//!
//! A line ends at `\n` or `\r`, as a CSV row does (so `\r\n` is a line and an empty one, and
//! the carriage return does not count against the maximum). The bytes of a line beyond the
//! maximum are dropped up to its end, which is kept, so line numbers stay right; if the kept
//! part leaves a quoted field open, a closing quote is added, so that the parser ends the row
//! at that newline instead of swallowing the rows after it. Whether a field is open is told
//! by the csv crate's own rules ([`QuoteState`]): a quote opens a field only at its start, so
//! a stray quote inside an unquoted field (`a"b`) opens nothing. Where cuts happened is logged in the reader's output coordinates, so that the
//! caller can tell which rows were cut and map positions back to the file's offsets.

use std::collections::VecDeque;
use std::io::Read;

/// Where a [`LineLimitedReader`] cut lines, in the coordinates of what it returned.
#[derive(Debug, Default)]
pub(crate) struct CutLog {
    /// (output position of the cut, input bytes consumed there beyond the output bytes), in
    /// order.
    cuts: VecDeque<(u64, u64)>,
    /// Input bytes dropped at cuts already taken off the log.
    dropped_before: u64,
}

impl CutLog {
    /// Takes the cuts of a row ending at output position `end` (and of those before it) off
    /// the log; whether there were any. A cut sits before its line's end, or at the very end
    /// of the input when the last line has none: either way at or below its row's end.
    pub(crate) fn take_until(&mut self, end: u64) -> bool {
        let mut any = false;
        while let Some(&(at, dropped)) = self.cuts.front() {
            if at > end {
                break;
            }
            self.dropped_before += dropped;
            self.cuts.pop_front();
            any = true;
        }
        any
    }

    /// The input offset of output position `at`, a row's start or end (which must not be
    /// below a cut taken off the log): `at` plus the bytes dropped at or before it. (No row
    /// starts at a cut: a cut line keeps at least one byte.)
    pub(crate) fn input_offset(&self, at: u64) -> u64 {
        at + self.dropped_before
            + self
                .cuts
                .iter()
                .take_while(|(cut, _)| *cut <= at)
                .map(|(_, dropped)| dropped)
                .sum::<u64>()
    }
}

/// Where the csv crate's parser (with its defaults: doubled quotes escape, no escape byte)
/// stands in a field, as far as quoting goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum QuoteState {
    /// At a field's start, where a quote opens a quoted field.
    FieldStart,
    /// In an unquoted field, where a quote is a plain byte.
    Unquoted,
    /// In a quoted field: line ends are data.
    Quoted,
    /// Just after a quote in a quoted field: it closes the field unless another follows.
    QuoteInQuoted,
}

/// The csv parser's quoting, followed over the bytes it is given.
#[derive(Clone, Copy, Debug)]
struct QuoteTracker {
    quote: u8,
    delimiter: u8,
    state: QuoteState,
}

impl QuoteTracker {
    fn step(&mut self, b: u8) {
        let ends_field = b == self.delimiter || b == b'\n' || b == b'\r';
        self.state = match self.state {
            QuoteState::Quoted if b == self.quote => QuoteState::QuoteInQuoted,
            QuoteState::Quoted => QuoteState::Quoted,
            QuoteState::QuoteInQuoted if b == self.quote => QuoteState::Quoted,
            QuoteState::FieldStart if b == self.quote => QuoteState::Quoted,
            _ if ends_field => QuoteState::FieldStart,
            _ => QuoteState::Unquoted,
        };
    }

    /// Follows `bytes`. Up to the first quote only the last byte can matter (outside a quoted
    /// field, where the state is a field's start after a delimiter or line end and unquoted
    /// otherwise), so the common chunk without quotes costs one vectorized search.
    fn advance(&mut self, bytes: &[u8]) {
        let first_quote = memchr::memchr(self.quote, bytes).unwrap_or(bytes.len());
        if first_quote > 0 && self.state != QuoteState::Quoted {
            self.step(bytes[first_quote - 1]);
        }
        for &b in &bytes[first_quote..] {
            self.step(b);
        }
    }

    /// Whether a quoted field is open.
    fn in_quotes(&self) -> bool {
        self.state == QuoteState::Quoted
    }
}

/// Passes `inner`'s bytes on, cutting lines longer than `max` bytes.
pub(crate) struct LineLimitedReader<R> {
    inner: R,
    max: usize,
    /// Bytes of the current line passed on.
    run: usize,
    /// Dropping the rest of the current line.
    dropping: bool,
    /// The parser's quoting after the bytes passed on.
    quoting: QuoteTracker,
    /// Bytes returned so far.
    position: u64,
    log: CutLog,
}

impl<R: Read> LineLimitedReader<R> {
    /// Wraps `inner`, which starts at a row's start, for a parser with this quote and
    /// delimiter.
    pub(crate) fn new(inner: R, max: usize, quote: u8, delimiter: u8) -> Self {
        Self {
            inner,
            max: max.max(1),
            run: 0,
            dropping: false,
            quoting: QuoteTracker {
                quote,
                delimiter,
                state: QuoteState::FieldStart,
            },
            position: 0,
            log: CutLog::default(),
        }
    }

    /// Where lines were cut (the caller takes cuts off as it goes past them).
    pub(crate) fn cuts(&mut self) -> &mut CutLog {
        &mut self.log
    }

    /// Whether `chunk` passes as it is, updating the current line's length if so. With the
    /// chunk no longer than the maximum, only its first line (which continues the current
    /// one) and its last (which the next chunk continues) could be too long.
    fn fits(&mut self, chunk: &[u8]) -> bool {
        if self.dropping || chunk.len() > self.max {
            return false;
        }
        match memchr::memchr2(b'\n', b'\r', chunk) {
            None if self.run + chunk.len() <= self.max => {
                self.run += chunk.len();
                true
            }
            Some(first) if self.run + first <= self.max => {
                let last = memchr::memrchr2(b'\n', b'\r', chunk).unwrap_or(first);
                self.run = chunk.len() - last - 1;
                true
            }
            _ => false,
        }
    }

    /// Logs that `shift` more input bytes than output bytes went at output position `at`.
    fn log_cut(&mut self, at: u64, dropped: u64) {
        match self.log.cuts.back_mut() {
            // The same cut, continued in a later read.
            Some((last, total)) if *last == at => *total += dropped,
            _ => self.log.cuts.push_back((at, dropped)),
        }
    }
}

impl<R: Read> Read for LineLimitedReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            let n = self.inner.read(buf)?;
            if n == 0 {
                return Ok(0);
            }
            if self.fits(&buf[..n]) {
                // The common case, checked in a few vectorized passes: no line of this chunk
                // goes past the maximum, and it passes unchanged.
                self.quoting.advance(&buf[..n]);
                self.position += n as u64;
                return Ok(n);
            }
            // Compacts `buf[..n]` in place: what is kept never outgrows what was read, since
            // a closing quote is only added where at least one byte is dropped.
            let mut written = 0;
            let mut start = 0;
            while start < n {
                let newline = memchr::memchr2(b'\n', b'\r', &buf[start..n]).map(|i| start + i);
                let end = newline.unwrap_or(n);
                let segment = end - start;
                let keep = if self.dropping {
                    0
                } else {
                    segment.min(self.max.saturating_sub(self.run))
                };
                self.quoting.advance(&buf[start..start + keep]);
                // Nothing dropped so far in this read: the bytes are already in place.
                if written != start {
                    buf.copy_within(start..start + keep, written);
                }
                written += keep;
                self.run += keep;
                if keep < segment {
                    let at = self.position + written as u64;
                    let mut shift = (segment - keep) as u64;
                    if !self.dropping {
                        self.dropping = true;
                        if self.quoting.in_quotes() {
                            buf[written] = self.quoting.quote;
                            written += 1;
                            shift -= 1;
                            self.quoting.step(self.quoting.quote);
                        }
                    }
                    self.log_cut(at, shift);
                }
                match newline {
                    Some(at) => {
                        buf[written] = buf[at];
                        self.quoting.step(buf[at]);
                        written += 1;
                        self.run = 0;
                        self.dropping = false;
                        start = at + 1;
                    }
                    None => start = n,
                }
            }
            if written > 0 {
                self.position += written as u64;
                return Ok(written);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(input: &str, max: usize, chunk: usize) -> (String, Vec<(u64, u64)>) {
        let mut reader = LineLimitedReader::new(input.as_bytes(), max, b'"', b',');
        let mut out = Vec::new();
        let mut buf = vec![0u8; chunk];
        loop {
            let n = reader.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        let cuts = reader.cuts().cuts.iter().copied().collect();
        (String::from_utf8(out).unwrap(), cuts)
    }

    #[test]
    fn long_lines_are_cut_at_the_maximum_and_keep_their_newline() {
        for chunk in [1, 3, 7, 64, 4096] {
            let (out, cuts) = cut("ab\nabcdefgh\nxyz\nabcdefghijk", 4, chunk);
            assert_eq!(out, "ab\nabcd\nxyz\nabcd", "chunk {chunk}");
            // Output positions 7 and 16; 4 and 7 bytes dropped.
            assert_eq!(cuts, vec![(7, 4), (16, 7)], "chunk {chunk}");
        }
    }

    #[test]
    fn chunks_of_short_lines_pass_unchanged_and_still_count_the_line() {
        // Lines of 3 bytes in chunks of 4 take the fast path, and the long line still cuts.
        let input = "ab\ncd\nef\nabcdefghij\n\"q\"\n";
        for chunk in [2, 4, 5, 8] {
            let (out, cuts) = cut(input, 6, chunk);
            assert_eq!(out, "ab\ncd\nef\nabcdef\n\"q\"\n", "chunk {chunk}");
            assert_eq!(cuts, vec![(15, 4)], "chunk {chunk}");
        }
    }

    #[test]
    fn a_cut_inside_quotes_closes_them_so_the_next_rows_stay_rows() {
        let (out, cuts) = cut("1,\"abcdefgh\"\n2,ok\n", 5, 4096);
        assert_eq!(out, "1,\"ab\"\n2,ok\n");
        // 7 input bytes dropped, one quote added.
        assert_eq!(cuts, vec![(5, 6)]);
        let mut rows = csv::ReaderBuilder::new()
            .has_headers(false)
            .from_reader(out.as_bytes());
        let rows: Vec<csv::StringRecord> = rows.records().map(Result::unwrap).collect();
        assert_eq!(rows.len(), 2);
        assert_eq!(&rows[1][1], "ok");
    }

    /// The same cutting, a byte at a time.
    fn reference(input: &[u8], max: usize) -> Vec<u8> {
        let (mut out, mut run, mut dropping) = (Vec::new(), 0, false);
        let mut quoting = QuoteTracker {
            quote: b'"',
            delimiter: b',',
            state: QuoteState::FieldStart,
        };
        for &b in input {
            if b == b'\n' || b == b'\r' {
                out.push(b);
                quoting.step(b);
                (run, dropping) = (0, false);
            } else if dropping {
            } else if run < max {
                quoting.step(b);
                out.push(b);
                run += 1;
            } else {
                dropping = true;
                if quoting.in_quotes() {
                    out.push(b'"');
                    quoting.step(b'"');
                }
            }
        }
        out
    }

    /// Whether the csv crate ends its parse of `bytes` inside a quoted field, told by appending
    /// a row: outside quotes it comes out as a row of its own.
    fn csv_in_quotes(bytes: &[u8]) -> bool {
        let mut probe = bytes.to_vec();
        probe.extend_from_slice(b"\nPROBE\n");
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .from_reader(&probe[..]);
        let last = reader.byte_records().filter_map(Result::ok).last();
        !last.is_some_and(|r| r.len() == 1 && &r[0] == b"PROBE")
    }

    #[test]
    fn a_stray_quote_in_an_unquoted_field_opens_nothing() {
        // `a"b` is an unquoted field for the csv crate: cutting the next long line adds no
        // quote, which would have become data.
        let (out, _) = cut("a\"b,1\nabcdefghij\n2,ok\n", 6, 4096);
        assert_eq!(out, "a\"b,1\nabcdef\n2,ok\n");
        // A quoted field left open by an odd quote count elsewhere is still closed at a cut.
        let (out, _) = cut("x\"\"y,\"abcdefgh\nz\n", 8, 4096);
        assert_eq!(out, "x\"\"y,\"ab\"\nz\n");
    }

    proptest::proptest! {
        #[test]
        fn cuts_like_the_byte_at_a_time_reference(
            input in proptest::collection::vec(
                proptest::sample::select(vec![b'a', b'"', b'\n', b',', b'\r']), 0..300),
            max in 1usize..40,
            chunk in 1usize..64,
        ) {
            let mut reader = LineLimitedReader::new(&input[..], max, b'"', b',');
            let mut out = Vec::new();
            let mut buf = vec![0u8; chunk];
            loop {
                let n = reader.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                out.extend_from_slice(&buf[..n]);
            }
            proptest::prop_assert_eq!(&out, &reference(&input, max));
            // The tracker agrees with the csv crate on whether the input ends inside quotes.
            let mut tracker = QuoteTracker { quote: b'"', delimiter: b',', state: QuoteState::FieldStart };
            tracker.advance(&input);
            proptest::prop_assert_eq!(tracker.in_quotes(), csv_in_quotes(&input), "input {:?}", String::from_utf8_lossy(&input));
            // Every position after a newline maps back to the byte after that newline.
            let log = reader.cuts();
            let ends = |b: &u8| *b == b'\n' || *b == b'\r';
            let ins: Vec<usize> = input.iter().enumerate().filter(|(_, b)| ends(b)).map(|(i, _)| i + 1).collect();
            let outs: Vec<usize> = out.iter().enumerate().filter(|(_, b)| ends(b)).map(|(i, _)| i + 1).collect();
            for (i, o) in ins.iter().zip(&outs) {
                proptest::prop_assert_eq!(log.input_offset(*o as u64), *i as u64);
            }
            // The end maps to the end, also after a cut last line without a line break.
            proptest::prop_assert_eq!(log.input_offset(out.len() as u64), input.len() as u64);
        }
    }

    #[test]
    fn positions_map_back_to_the_input() {
        let input = "ab\nabcdefgh\nxyz\n";
        let (out, _) = cut(input, 4, 4096);
        let mut reader = LineLimitedReader::new(input.as_bytes(), 4, b'"', b',');
        std::io::copy(&mut reader, &mut std::io::sink()).unwrap();
        let log = reader.cuts();
        // "xyz" starts at output 8, input 12.
        assert_eq!(&out[8..11], "xyz");
        assert_eq!(log.input_offset(8), 12);
        assert!(log.take_until(8));
        assert_eq!(log.input_offset(8), 12);
    }
}
