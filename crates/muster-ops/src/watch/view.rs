//! How `muster watch` draws its model: a status header (the link, the stream's age, the ledger
//! sequence, transitions per second), one row per kind (depths per state, transitions per
//! second, health), and a footer.

use std::time::{Duration, Instant};

use ratatui::Frame;
use ratatui::layout::{Alignment, Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Cell, Paragraph, Row, Table};

use super::model::{Link, Model};
use crate::command::{STATES, kind_order};

/// `1.2 s`, `4m07s`, `2h03m`.
pub fn age(d: Duration) -> String {
    let s = d.as_secs();
    if s < 60 {
        format!("{:.1} s", d.as_secs_f64())
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    }
}

/// The stream's state in words, for the header (and the plain status lines).
pub fn status(model: &Model, now: Instant) -> String {
    let link = match &model.link {
        Link::Connecting => "connecting".to_owned(),
        Link::Live if model.stalled(now) => "STALLED".to_owned(),
        Link::Live => "live".to_owned(),
        Link::Down(why) => format!("reconnecting ({why})"),
    };
    let connected = model
        .connected_at
        .map(|t| format!("connected {}", age(now.saturating_duration_since(t))))
        .unwrap_or_else(|| "not connected".into());
    let quiet = model
        .quiet_for(now)
        .map(|q| format!("last event {} ago", age(q)))
        .unwrap_or_else(|| "no event yet".into());
    format!(
        "{link} · {connected} · {quiet} · ledger seq {} · {:.1} transitions/s · {} reconnects",
        model.seq,
        model.rate(None, now),
        model.reconnects
    )
}

fn right(text: String) -> Cell<'static> {
    Cell::from(Line::from(text).alignment(Alignment::Right))
}

/// Draws the whole screen.
pub fn draw(frame: &mut Frame, model: &Model, now: Instant) {
    let [title, header, table, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    let bold = Style::default().add_modifier(Modifier::BOLD);
    frame.render_widget(
        Paragraph::new(format!("Muster live feed from {}", model.base)).style(bold),
        title,
    );
    let header_style = match model.link {
        Link::Live if !model.stalled(now) => Style::default(),
        _ => Style::default().fg(Color::Red),
    };
    frame.render_widget(
        Paragraph::new(status(model, now)).style(header_style),
        header,
    );

    let kinds = kind_order(model.depths.keys().chain(model.health.keys()).cloned());
    let rows = kinds.iter().map(|kind| {
        let mut cells = vec![Cell::from(kind.clone())];
        cells.extend(
            STATES
                .iter()
                .map(|(s, _)| right(model.depth(kind, s).to_string())),
        );
        cells.push(right(format!("{:.1}", model.rate(Some(kind), now))));
        let lease = model
            .oldest_lease
            .get(kind)
            .map_or_else(|| "-".to_owned(), |s| age(Duration::from_secs_f64(*s)));
        cells.push(right(lease).style(if model.lease_runs_long(kind) {
            Style::default().fg(Color::Red)
        } else {
            Style::default()
        }));
        match model.health.get(kind) {
            Some(h) => {
                let ready = match h.ready {
                    Some(true) => "yes",
                    Some(false) => "NO",
                    None => "?",
                };
                cells.push(Cell::from(ready).style(if h.ready == Some(true) {
                    Style::default()
                } else {
                    Style::default().fg(Color::Red)
                }));
                cells.push(Cell::from(h.phase.clone()));
                cells.push(right(h.restarts.to_string()));
                cells.push(Cell::from(h.event.clone().unwrap_or_default()));
            }
            None => cells.push(Cell::from("-")),
        }
        Row::new(cells)
    });
    let mut heading = vec![Cell::from("KIND")];
    heading.extend(STATES.iter().map(|(_, t)| right((*t).to_owned())));
    heading.push(right("TR/S".into()));
    heading.push(right("LEASE AGE".into()));
    heading.extend(["READY", "PHASE"].map(Cell::from));
    heading.push(right("RESTARTS".into()));
    heading.push(Cell::from("NEWEST HEALTH EVENT"));
    // A width for each heading above; the newest health event takes the rest of the line.
    let widths = [11, 7, 7, 7, 7, 8, 9, 6, 9, 5, 16, 8]
        .map(Constraint::Length)
        .into_iter()
        .chain([Constraint::Fill(1)]);
    frame.render_widget(
        Table::new(rows, widths)
            .header(Row::new(heading).style(bold))
            .column_spacing(1),
        table,
    );
    let (finished, all) = model.totals();
    let at = model.depths_at.as_deref().unwrap_or("-");
    frame.render_widget(
        Paragraph::new(format!(
            "{finished}/{all} items finished · depths at {at} · q quits"
        )),
        footer,
    );
}
