//! The `read` tool: a window of lines of a text file, or — for a directory path — its entries
//! (name, kind, size; at most 1000), which saves the model a separate listing tool.
//!
//! Reading is bounded: lines before `offset` are skipped without being kept, and at most
//! `[files] max_read_bytes` of content is held and returned per call, so a huge file never lands
//! in memory whole. It must not open anything except through [`policy::open_for_read`].

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::num::NonZeroU64;
use std::sync::Arc;

use cap_std::fs::Dir;
use mai_core::tool::{ToolContext, ToolError, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::Sandbox;
use super::policy::{self, Opened};

pub(super) const DESCRIPTION: &str = "Read a text file in your file space (paths relative to its \
root), or list a directory. Large files come in pieces: pass the returned next_offset as offset \
to continue.";

/// How much of the file's start is checked for binary content.
const SNIFF_BYTES: u64 = 8 * 1024;
/// At most this many directory entries are listed.
const MAX_LISTED: usize = 1000;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ReadArgs {
    path: String,
    /// First line to return, 1-based (default 1).
    offset: Option<NonZeroU64>,
    /// How many lines to return (default: as many as fit).
    limit: Option<NonZeroU64>,
}

pub(super) struct ReadTool(pub(super) Arc<Sandbox>);

impl TypedTool for ReadTool {
    type Args = ReadArgs;

    async fn call(&self, ctx: &ToolContext, args: ReadArgs) -> Result<Value, ToolError> {
        let window = Window {
            start: args.offset.map_or(1, NonZeroU64::get),
            limit: args.limit.map(NonZeroU64::get),
            max_bytes: ctx.config().files.max_read_bytes,
        };
        let cancel = ctx.cancel_token().clone();
        self.0
            .run(ctx, move |space| {
                let access = &space.access;
                let confined = access.is_confined();
                let path = policy::check_path(&args.path, confined).map_err(ToolError::new)?;
                let failed = |e: io::Error| policy::io_failure("read", &args.path, &e, confined);
                let mut result = match policy::open_for_read(access, &path).map_err(failed)? {
                    Opened::File { file, size } => {
                        read_window(file, size, &window, &cancel).map_err(failed)?
                    }
                    Opened::Directory(dir) => list_directory(&dir).map_err(failed)?,
                };
                if let Some(object) = result.as_object_mut() {
                    object.insert("success".into(), true.into());
                    object.insert("path".into(), args.path.into());
                }
                Ok(result)
            })
            .await
    }
}

/// Which lines a call asks for, and the byte budget.
struct Window {
    start: u64,
    limit: Option<u64>,
    max_bytes: u64,
}

/// The lines of `window` from `file` (`size` bytes), as the tool's result.
fn read_window(
    mut file: File,
    size: u64,
    window: &Window,
    cancel: &CancellationToken,
) -> io::Result<Value> {
    refuse_binary(&mut file)?;
    file.seek(SeekFrom::Start(0))?;
    let mut reader = BufReader::with_capacity(64 * 1024, file);

    if let Skipped::EndOfFile { total_lines: total } =
        skip_lines(&mut reader, window.start - 1, cancel)?
    {
        return Ok(json!({
            "content": "",
            "start_line": window.start,
            "end_line": total,
            "total_lines": total,
            "size_bytes": size,
            "truncated": false,
            "note": format!("the file has {total} lines; offset {} is past its end", window.start),
        }));
    }
    let lines = Lines::read(&mut reader, window)?;
    Ok(lines.into_result(window, size))
}

/// The lines read for a window.
struct Lines {
    content: Vec<u8>,
    /// The last line read (`window.start - 1` when none was).
    end_line: u64,
    /// Where the next call starts when the file goes on past this window.
    next_offset: Option<u64>,
    /// Why the window was cut short, when it is not just "more follows".
    note: Option<String>,
}

impl Lines {
    /// Reads whole lines from `reader` (at the window's first line) until the window's line
    /// limit, its byte budget or the end of the file; a first line over the budget alone is
    /// cut at a character boundary.
    fn read(reader: &mut BufReader<File>, window: &Window) -> io::Result<Lines> {
        let mut lines = Lines {
            content: Vec::new(),
            end_line: window.start - 1,
            next_offset: None,
            note: None,
        };
        loop {
            if window
                .limit
                .is_some_and(|limit| lines.end_line + 1 - window.start >= limit)
            {
                break;
            }
            let remaining = window.max_bytes.saturating_sub(lines.content.len() as u64);
            let mut line = Vec::new();
            // One byte over the budget tells "does not fit" apart from "fits exactly".
            let read = reader
                .by_ref()
                .take(remaining.saturating_add(1))
                .read_until(b'\n', &mut line)?;
            if read == 0 {
                break;
            }
            if line.len() as u64 > remaining {
                if lines.content.is_empty() {
                    // A single line over the budget: show its start so the call still progresses.
                    line.truncate(utf8_prefix_len(&line, remaining));
                    lines.content = line;
                    lines.end_line = window.start;
                    lines.note = Some(format!(
                        "line {} is longer than [files] max_read_bytes ({}); only its start \
                         is shown",
                        lines.end_line, window.max_bytes
                    ));
                }
                lines.next_offset = Some(lines.end_line + 1);
                break;
            }
            lines.content.extend_from_slice(&line);
            lines.end_line += 1;
        }
        if lines.next_offset.is_none() && !reader.fill_buf()?.is_empty() {
            lines.next_offset = Some(lines.end_line + 1);
        }
        Ok(lines)
    }

    /// The tool's result: the text and where it is in the file, with the next offset when more
    /// follows, else the file's line count.
    fn into_result(self, window: &Window, size: u64) -> Value {
        let Lines {
            content,
            end_line,
            next_offset,
            note,
        } = self;
        let mut result = json!({
            "content": String::from_utf8_lossy(&content),
            "start_line": window.start,
            "end_line": end_line,
            "size_bytes": size,
            "truncated": next_offset.is_some(),
        });
        if let Some(object) = result.as_object_mut() {
            match next_offset {
                Some(next) => {
                    object.insert("next_offset".into(), next.into());
                    object.insert(
                        "note".into(),
                        note.unwrap_or_else(|| {
                            format!("more follows: read again with offset={next}")
                        })
                        .into(),
                    );
                }
                // Only known without scanning ahead when this window reached the end.
                None => {
                    object.insert("total_lines".into(), end_line.into());
                    if end_line < window.start {
                        object.insert(
                            "note".into(),
                            format!(
                                "the file has {end_line} lines; offset {} is past its end",
                                window.start
                            )
                            .into(),
                        );
                    }
                }
            }
        }
        result
    }
}

/// Refuses a file whose first KBs hold a NUL byte or invalid UTF-8: returning it as text would
/// only feed the model noise.
fn refuse_binary(file: &mut File) -> io::Result<()> {
    let mut head = Vec::new();
    file.by_ref().take(SNIFF_BYTES).read_to_end(&mut head)?;
    let binary = |what: String| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "it looks binary ({what} in the first {SNIFF_BYTES} bytes); only text files can be read"
            ),
        )
    };
    if let Some(at) = head.iter().position(|&b| b == 0) {
        return Err(binary(format!("a NUL byte at byte {at}")));
    }
    match std::str::from_utf8(&head) {
        // `error_len() == None`: a character cut by the sniff window, not invalid text.
        Err(e) if e.error_len().is_some() => {
            Err(binary(format!("invalid UTF-8 at byte {}", e.valid_up_to())))
        }
        _ => Ok(()),
    }
}

enum Skipped {
    Reached,
    /// The file ended before the wanted line.
    EndOfFile {
        total_lines: u64,
    },
}

/// Skips `count` lines without keeping them.
fn skip_lines(
    reader: &mut BufReader<File>,
    count: u64,
    cancel: &CancellationToken,
) -> io::Result<Skipped> {
    let mut passed = 0;
    // Bytes seen after the last newline: a last line without a newline still counts.
    let mut partial = false;
    while passed < count {
        if cancel.is_cancelled() {
            return Err(io::Error::new(
                io::ErrorKind::Interrupted,
                "the task was cancelled",
            ));
        }
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(Skipped::EndOfFile {
                total_lines: passed + u64::from(partial),
            });
        }
        let consumed = match buf.iter().position(|&b| b == b'\n') {
            Some(at) => {
                passed += 1;
                partial = false;
                at + 1
            }
            None => {
                partial = true;
                buf.len()
            }
        };
        reader.consume(consumed);
    }
    Ok(Skipped::Reached)
}

/// The longest prefix of `bytes` of at most `max` bytes that does not cut a character.
fn utf8_prefix_len(bytes: &[u8], max: u64) -> usize {
    let max = usize::try_from(max).unwrap_or(usize::MAX).min(bytes.len());
    match std::str::from_utf8(&bytes[..max]) {
        Ok(_) => max,
        Err(e) => e.valid_up_to(),
    }
}

/// A directory's entries (name, kind, size), sorted by name, at most [`MAX_LISTED`].
fn list_directory(dir: &Dir) -> io::Result<Value> {
    let mut entries = Vec::new();
    let mut total = 0usize;
    for entry in dir.entries()? {
        let entry = entry?;
        total += 1;
        if entries.len() >= MAX_LISTED {
            continue;
        }
        let file_type = entry.file_type()?;
        let kind = if file_type.is_dir() {
            "dir"
        } else if file_type.is_file() {
            "file"
        } else if file_type.is_symlink() {
            "symlink"
        } else {
            "special"
        };
        let mut item = json!({"name": entry.file_name().to_string_lossy(), "kind": kind});
        if file_type.is_file()
            && let (Some(object), Ok(meta)) = (item.as_object_mut(), entry.metadata())
        {
            object.insert("size".into(), meta.len().into());
        }
        entries.push(item);
    }
    entries.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    Ok(json!({
        "kind": "directory",
        "entries": entries,
        "total_entries": total,
        "truncated": total > entries.len(),
    }))
}
