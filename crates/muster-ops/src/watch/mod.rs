//! `muster watch`: the live feed (`GET /v1/events`) as a screen redrawn in place.
//!
//! The model ([`model`]) folds the events in; the view ([`view`]) draws it with ratatui. The
//! loop here opens the stream, resumes it with `Last-Event-ID` after a disconnect (on the next
//! replica, if several are given; after the delay the server's `shutdown` event or `retry:`
//! asked for), redraws four times a second, and ends on `q`, Esc, Ctrl-C, SIGTERM or the
//! caller's `until`. The terminal is put back (raw mode off, the main screen back) on every
//! way out, a panic included (ratatui's hook). When stdout is not a terminal it prints a
//! status line every 2 s instead.
//!
//! A refusal (401, 403, 404, 400) ends the watch with that error; no answer or a 503 is
//! retried.

pub mod model;
pub mod view;

use std::io::{IsTerminal, Write as _};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use ratatui::DefaultTerminal;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use tokio::sync::mpsc;

pub use model::Model;

use crate::sse::SseReader;
use crate::{Client, OpsError};

/// Ends the watch when it answers true (checked at every redraw).
pub type Until = Box<dyn Fn(&Model) -> bool + Send + Sync>;

/// How often the oldest leases' ages are read from `/metrics`.
const METRICS_EVERY: Duration = Duration::from_secs(5);

/// Reconnection delay when the server asked for none, and its bounds.
const RECONNECT: Duration = Duration::from_millis(1_000);
const RECONNECT_MAX: Duration = Duration::from_secs(10);

/// Where the model is drawn.
enum Screen {
    Tui(DefaultTerminal),
    Lines,
    /// Nothing drawn (tests, and callers that only want the model).
    Hidden,
}

impl Screen {
    fn draw(&mut self, model: &Model) -> Result<(), OpsError> {
        let now = Instant::now();
        match self {
            Screen::Tui(terminal) => {
                terminal.draw(|frame| view::draw(frame, model, now))?;
            }
            Screen::Lines => {
                let (finished, all) = model.totals();
                let mut out = std::io::stdout().lock();
                writeln!(
                    out,
                    "{}: {} · {finished}/{all} items finished",
                    model.base,
                    view::status(model, now)
                )?;
                out.flush()?;
            }
            Screen::Hidden => {}
        }
        Ok(())
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        if let Screen::Tui(_) = self {
            ratatui::restore();
        }
    }
}

/// Keys read on a thread of their own (crossterm's reads block); a message means "quit".
fn read_keys(quit: mpsc::UnboundedSender<()>, done: Arc<AtomicBool>) {
    std::thread::spawn(move || {
        while !done.load(Ordering::Relaxed) {
            if !event::poll(Duration::from_millis(100)).unwrap_or(false) {
                continue;
            }
            let Ok(Event::Key(key)) = event::read() else {
                continue;
            };
            let ctrl_c =
                key.code == KeyCode::Char('c') && key.modifiers.contains(KeyModifiers::CONTROL);
            if key.kind == KeyEventKind::Press
                && (ctrl_c || matches!(key.code, KeyCode::Char('q') | KeyCode::Esc))
            {
                let _ = quit.send(());
                return;
            }
        }
    });
}

/// A future that ends on SIGTERM or SIGINT.
fn signals(quit: mpsc::UnboundedSender<()>) -> Result<(), OpsError> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        let _ = quit.send(());
    });
    Ok(())
}

/// Watches the feed of `clients` (one per replica; the next one after a disconnect) until the
/// user quits, a signal, `until`, or a refusal; the model at the end.
pub async fn run(clients: Vec<Client>, until: Option<Until>) -> Result<Model, OpsError> {
    run_on(clients, until, true).await
}

/// [`run`] without drawing anything: the model at the end.
pub async fn run_hidden(clients: Vec<Client>, until: Option<Until>) -> Result<Model, OpsError> {
    run_on(clients, until, false).await
}

async fn run_on(clients: Vec<Client>, until: Option<Until>, draw: bool) -> Result<Model, OpsError> {
    let first = clients
        .first()
        .ok_or_else(|| OpsError::Usage("no --url to watch".into()))?;
    let mut model = Model::new(first.base(), Instant::now());
    let (quit_tx, mut quit) = mpsc::unbounded_channel();
    if draw {
        signals(quit_tx.clone())?;
    }
    let tty = std::io::stdout().is_terminal();
    let keys_done = Arc::new(AtomicBool::new(false));
    let mut screen = if !draw {
        Screen::Hidden
    } else if tty {
        let terminal = ratatui::try_init()?;
        read_keys(quit_tx, keys_done.clone());
        Screen::Tui(terminal)
    } else {
        Screen::Lines
    };
    let result = follow(&clients, &mut model, &mut screen, &mut quit, until).await;
    keys_done.store(true, Ordering::Relaxed);
    drop(screen);
    result.map(|()| model)
}

async fn follow(
    clients: &[Client],
    model: &mut Model,
    screen: &mut Screen,
    quit: &mut mpsc::UnboundedReceiver<()>,
    until: Option<Until>,
) -> Result<(), OpsError> {
    let tick = match screen {
        Screen::Tui(_) => Duration::from_millis(250),
        Screen::Lines => Duration::from_secs(2),
        Screen::Hidden => Duration::from_millis(50),
    };
    let mut redraw = tokio::time::interval(tick);
    redraw.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let done = |model: &Model| until.as_ref().is_some_and(|u| u(model));
    let mut turn = 0usize;
    let mut server_retry: Option<u64> = None;
    let mut last_metrics: Option<Instant> = None;
    loop {
        let client = &clients[turn % clients.len()];
        let opened = tokio::select! {
            r = client.open_events(model.last_event_id.as_deref()) => r,
            _ = quit.recv() => return Ok(()),
        };
        match opened {
            Ok(res) => {
                model.connected(client.base(), Instant::now());
                let mut body = res.into_body();
                let mut reader = SseReader::default();
                let mut stream_retry = None;
                let why = loop {
                    tokio::select! {
                        frame = body.frame() => match frame {
                            Some(Ok(frame)) => {
                                let Ok(data) = frame.into_data() else { continue };
                                let now = Instant::now();
                                for block in reader.push(&data) {
                                    stream_retry = block.retry_ms().or(stream_retry);
                                    if let Some(ev) = block.event() {
                                        model.apply(&ev, now);
                                    }
                                }
                            }
                            Some(Err(e)) => break format!("the stream broke: {e}"),
                            None => break "the stream ended".to_owned(),
                        },
                        _ = redraw.tick() => {
                            if last_metrics.is_none_or(|t| t.elapsed() >= METRICS_EVERY) {
                                last_metrics = Some(Instant::now());
                                // Best effort: a failed read keeps the last figures.
                                if let Ok(Ok(text)) = tokio::time::timeout(
                                    Duration::from_secs(2),
                                    client.metrics(),
                                )
                                .await
                                {
                                    model.apply_metrics(&text);
                                }
                            }
                            screen.draw(model)?;
                            if done(model) {
                                return Ok(());
                            }
                        }
                        _ = quit.recv() => return Ok(()),
                    }
                };
                server_retry = model.retry_ms.or(stream_retry);
                if model.link == model::Link::Live {
                    model.disconnected(why);
                }
            }
            Err(e) if e.is_transient() => model.disconnected(e.to_string()),
            Err(e) => return Err(e),
        }
        turn += 1;
        let delay = server_retry
            .map(Duration::from_millis)
            .unwrap_or(RECONNECT)
            .clamp(Duration::from_millis(100), RECONNECT_MAX);
        let wake = tokio::time::sleep(delay);
        tokio::pin!(wake);
        loop {
            tokio::select! {
                () = &mut wake => break,
                _ = redraw.tick() => {
                    screen.draw(model)?;
                    if done(model) {
                        return Ok(());
                    }
                }
                _ = quit.recv() => return Ok(()),
            }
        }
    }
}

#[cfg(test)]
mod tests;
