//! `borderctl config show`: the config border-mgmt runs (GetConfig), as
//! the TOML it was given, with where it came from and when it was applied.
//! The text form stays valid TOML: the source and time are comment lines
//! above it, so the output can be saved and applied again.

use std::process::ExitCode;

use mgmt::pb;
use serde::Serialize;

use crate::cli::Target;
use crate::conn::{runtime, Res};
use crate::output::{self, utc, Render, Text};

pub fn show(target: &Target, json: bool) -> Res {
    let rt = runtime()?;
    let out = rt.block_on(async {
        let mut api = target.connect().await?;
        api.call(|mut c| async move { c.get_config(pb::GetConfigRequest {}).await })
            .await
    })?;
    output::print(&ConfigView::from(out), json)?;
    Ok(ExitCode::SUCCESS)
}

/// The running config: `source` is the file border-mgmt loaded, or
/// `<api>` for a config applied over the API (`borderctl apply`).
#[derive(Debug, Serialize)]
pub struct ConfigView {
    pub source: String,
    /// RFC 3339, UTC.
    pub applied_at: String,
    pub generation: u64,
    pub toml: String,
}

impl From<pb::GetConfigResponse> for ConfigView {
    fn from(c: pb::GetConfigResponse) -> ConfigView {
        ConfigView {
            source: c.origin,
            applied_at: utc(c.applied_unix_ms),
            generation: c.generation,
            toml: c.config_toml,
        }
    }
}

impl Render for ConfigView {
    fn render(&self) -> Text {
        let mut t = Text::default();
        let source = if self.source == mgmt::service::API_ORIGIN {
            format!("{} (applied over the API)", self.source)
        } else {
            self.source.clone()
        };
        t.line(format!("# source: {source}"));
        t.line(format!(
            "# applied: {} (generation {} published)",
            self.applied_at, self.generation
        ));
        t.line(self.toml.trim_end());
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_is_toml_with_its_source_in_comments() {
        let v = ConfigView::from(pb::GetConfigResponse {
            config_toml: "instance = \"lab\"\n".into(),
            origin: "/etc/border/lab.toml".into(),
            applied_unix_ms: 951_782_400_123,
            generation: 3,
        });
        let text = v.render().to_string();
        assert_eq!(
            text,
            "# source: /etc/border/lab.toml\n\
             # applied: 2000-02-29T00:00:00.123Z (generation 3 published)\n\
             instance = \"lab\""
        );
        let back: toml::Value = toml::from_str(&text).unwrap();
        assert_eq!(back["instance"].as_str(), Some("lab"));
        assert_eq!(
            serde_json::to_value(&v).unwrap(),
            serde_json::json!({
                "source": "/etc/border/lab.toml",
                "applied_at": "2000-02-29T00:00:00.123Z",
                "generation": 3,
                "toml": "instance = \"lab\"\n",
            })
        );
    }

    #[test]
    fn a_config_applied_over_the_api_says_so() {
        let v = ConfigView::from(pb::GetConfigResponse {
            config_toml: String::new(),
            origin: mgmt::service::API_ORIGIN.into(),
            applied_unix_ms: 1,
            generation: 1,
        });
        assert!(v
            .render()
            .to_string()
            .starts_with("# source: <api> (applied over the API)\n"));
    }
}
