//! `borderctl apply FILE`: the whole config through ApplyConfig (validated,
//! atomic), or only its verdict with `--dry-run`.

use std::path::Path;
use std::process::ExitCode;

use mgmt::pb;
use serde::Serialize;

use crate::cli::Target;
use crate::conn::{runtime, Failure, Res};
use crate::output::{self, Render, Text};

pub fn run(target: &Target, file: &Path, dry_run: bool, json: bool) -> Res {
    let text = std::fs::read_to_string(file)
        .map_err(|e| Failure::Other(format!("{}: cannot read: {e}", file.display())))?;
    let rt = runtime()?;
    let out = rt.block_on(async {
        let mut api = target.connect().await?;
        api.call(|mut c| async move {
            c.apply_config(pb::ApplyConfigRequest {
                config_toml: text,
                dry_run,
            })
            .await
        })
        .await
    });
    let out = out.map_err(|e| name_the_file(e, file))?;
    let view = ApplyView {
        file: file.display().to_string(),
        dry_run,
        generation: out.generation,
        changed: out.changed,
        pending: out.pending,
    };
    output::print(&view, json)?;
    Ok(ExitCode::SUCCESS)
}

/// The server names the text `<api>`; here it is the file.
fn name_the_file(e: Failure, file: &Path) -> Failure {
    let Failure::Other(m) = e else {
        return e;
    };
    let shown = file.display().to_string();
    Failure::Other(match m.strip_prefix(mgmt::service::API_ORIGIN) {
        Some(rest) if rest.starts_with(':') => format!("{shown}{rest}"),
        _ if m.contains("differs from the running config")
            || m.starts_with("border-mgmt refused the request") =>
        {
            format!("{shown}: {m}")
        }
        _ => m,
    })
}

/// ApplyConfig's answer for one file.
#[derive(Debug, Serialize)]
pub struct ApplyView {
    pub file: String,
    pub dry_run: bool,
    pub generation: u64,
    pub changed: bool,
    pub pending: String,
}

impl Render for ApplyView {
    fn render(&self) -> Text {
        let f = &self.file;
        let line = if self.dry_run {
            if self.changed {
                format!("{f}: valid; applying it would publish a new generation (dry run: nothing applied)")
            } else {
                format!("{f}: valid; equals the running config (dry run: nothing applied)")
            }
        } else {
            output::published(
                &format!("{f}: applied"),
                &format!("{f}: equals the running config:"),
                &self.pending,
                self.changed,
                self.generation,
            )
        };
        let mut t = Text::default();
        t.line(line);
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_errors_name_the_file() {
        let f = Path::new("new.toml");
        let named = |m: &str| name_the_file(Failure::Other(m.into()), f).to_string();
        let api = mgmt::service::API_ORIGIN;
        assert_eq!(
            named(&format!("{api}:27:1: vip[0]: bad")),
            "new.toml:27:1: vip[0]: bad"
        );
        assert_eq!(
            named("[dataplane] differs from the running config: restart"),
            "new.toml: [dataplane] differs from the running config: restart"
        );
        assert_eq!(named("something else"), "something else");
        let away = name_the_file(Failure::Unreachable("gone".into()), f);
        assert!(matches!(away, Failure::Unreachable(m) if m == "gone"));
    }

    #[test]
    fn apply_says_what_happened() {
        let mut v = ApplyView {
            file: "new.toml".into(),
            dry_run: false,
            generation: 4,
            changed: true,
            pending: String::new(),
        };
        assert_eq!(
            v.render().to_string(),
            "new.toml: applied: generation 4 published"
        );
        v.pending = "the arena is full".into();
        assert_eq!(
            v.render().to_string(),
            "new.toml: applied; the tables are not published yet: the arena is full \
             (border-mgmt retries by itself)"
        );
        v.pending.clear();
        v.changed = false;
        assert_eq!(
            v.render().to_string(),
            "new.toml: equals the running config: nothing published (generation 4)"
        );
        v.dry_run = true;
        assert_eq!(
            v.render().to_string(),
            "new.toml: valid; equals the running config (dry run: nothing applied)"
        );
        assert_eq!(
            serde_json::to_value(&v).unwrap(),
            serde_json::json!({"file": "new.toml", "dry_run": true, "generation": 4, "changed": false, "pending": ""})
        );
    }
}
