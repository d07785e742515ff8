//! The declarations (`keys::KEYS`) written out for people: the table of every key in
//! docs/configuration.md (`icecache keys`) and the example file deploy/icecache.toml
//! (`icecache keys --toml`). Tests hold both files to what this writes.

use super::keys::{needs, Absent, Kind, Reload, KEYS, TABLES};

/// The Markdown table of every key.
pub fn table() -> String {
    let mut table = String::from(
        "| key | flag | env | default | reload | meaning |\n|---|---|---|---|---|---|\n",
    );
    for key in KEYS {
        let name = match key.kind {
            Kind::Table if key.name == "prefixes" => "`[prefixes.NAME]`".to_owned(),
            Kind::Table => format!("`[{}]`", key.name),
            _ => format!("`{}`", key.name),
        };
        let flag = key
            .flag
            .map_or("(file only)".to_owned(), |f| format!("`--{f}`"));
        let env = key.env().map_or(String::new(), |e| format!("`{e}`"));
        let reload = match key.reload {
            Reload::Applied => "applied",
            Reload::Restart => "restart",
        };
        table.push_str(&format!(
            "| {name} | {flag} | {env} | {} | {reload} | {} |\n",
            key.default_text(),
            key.meaning
        ));
    }
    table
}

/// A config file naming every key: its meaning as a comment, then the key at its default, or
/// commented out where it has none to write.
pub fn example_file() -> String {
    let mut out = String::from(
        "# icecache configuration: every key, at its default (commented out where there is none).\n\
         # Flags and ICECACHE_* variables override these (`icecache --help`, `icecache keys`).\n\
         # Check a file with: icecache check-config deploy/icecache.toml\n",
    );
    for table in std::iter::once("").chain(TABLES.iter().copied()) {
        if !table.is_empty() {
            out.push_str(&format!("\n[{table}]\n"));
        }
        for key in KEYS {
            let (in_table, short) = match key.name.split_once('.') {
                Some((t, short)) => (t, short),
                None => ("", key.name),
            };
            if in_table != table {
                continue;
            }
            out.push('\n');
            for line in wrap(&plain(key.meaning), 96) {
                out.push_str(&format!("# {line}\n"));
            }
            let line = setting(short, key.kind, key.default);
            match needs(key.name) {
                // Meaningless (and refused) without the key it needs, which has no default.
                Some(_) if !line.starts_with('#') => out.push_str(&format!("# {line}")),
                _ => out.push_str(&line),
            }
        }
    }
    out
}

/// One setting's line (or commented lines) in the example file.
fn setting(name: &str, kind: Kind, absent: Absent) -> String {
    let quoted = |v: &str| match kind {
        Kind::Count { .. } | Kind::Bool => v.to_owned(),
        _ => format!("\"{v}\""),
    };
    match (kind, absent) {
        (Kind::Table, _) if name == "prefixes" => {
            "# [prefixes.analytics]\n# identity = \"revalidate\"\n\
             # credentials = \"inject\"\n# [prefixes.analytics.inject]\n\
             # \"s3.access-key-id\" = { env = \"ANALYTICS_S3_KEY\" }\n"
                .to_owned()
        }
        (Kind::Table, _) => format!(
            "# [{name}]\n# \"s3.secret-access-key\" = {{ file = \"/run/secrets/s3-secret\" }}\n\
             # \"client.region\" = {{ value = \"eu-west-1\" }}\n"
        ),
        (_, Absent::Value(value)) => format!("{name} = {}\n", quoted(value)),
        (_, Absent::Required) => format!("{name} = \"http://127.0.0.1:9001/iceberg\"\n"),
        (Kind::List, _) => format!("# {name} = [\"…\"]\n"),
        (Kind::Path, _) => format!("# {name} = \"/path\"\n"),
        (Kind::Count { min, .. }, _) => format!("# {name} = {min}\n"),
        (Kind::Duration { .. }, _) => format!("# {name} = \"300s\"\n"),
        _ => format!("# {name} = \"…\"\n"),
    }
}

/// Markdown as plain text: no backticks, `[label](target)` as its label.
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let (before, after) = rest.split_at(open);
        out.push_str(before);
        match after.find("](").zip(after.find(')')) {
            Some((middle, close)) if middle < close => {
                out.push_str(&after[1..middle]);
                rest = &after[close + 1..];
            }
            _ => {
                out.push('[');
                rest = &after[1..];
            }
        }
    }
    out.push_str(rest);
    out.replace('`', "")
}

/// `text` in lines of at most `width` characters, broken at spaces.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = vec![String::new()];
    for word in text.split_whitespace() {
        let line = lines.last_mut().expect("one line at least");
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            lines.push(word.to_owned());
        } else {
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
    }
    lines
}
