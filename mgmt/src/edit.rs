//! One change at a time (AddBackend, RemoveBackend, AddVip, RemoveVip): the
//! running config's text with one `[[vip.backend]]` or `[[vip]]` entry
//! added or removed, everything else (comments, layout, the other entries)
//! kept as it was. The [`crate::manager::Manager`] then validates and
//! applies the new text exactly as an ApplyConfig of it, so the checks, the
//! error messages and the durability are those of ApplyConfig.

use std::net::SocketAddr;

use toml_edit::{value, ArrayOfTables, DocumentMut, Item, Table};

/// One change to the running config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigEdit {
    /// A `[[vip.backend]]` appended to VIP `vip`.
    AddBackend {
        vip: String,
        backend: String,
        /// `None`: the config's default (1).
        weight: Option<u32>,
        zone: Option<String>,
        max_connections: Option<u32>,
    },
    /// The `[[vip.backend]]` of `vip` at `backend` taken out.
    RemoveBackend { vip: String, backend: String },
    /// `toml`: exactly one `[[vip]]` entry (with its `[[vip.backend]]`,
    /// `[vip.health]`, `[vip.limits]`), appended after the last VIP.
    AddVip { toml: String },
    /// The `[[vip]]` entry named `vip` taken out.
    RemoveVip { vip: String },
}

/// Why a change cannot even be written into the config text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    /// No VIP of that name.
    #[error("no VIP `{0}` in the running config")]
    NoVip(String),
    /// The VIP has no such backend.
    #[error("VIP `{vip}` has no backend {backend}")]
    NoBackend { vip: String, backend: SocketAddr },
    /// Not `addr:port`.
    #[error("backend `{0}`: expected addr:port, e.g. 10.20.0.11:8080 or [2001:db8::11]:8080")]
    BadAddress(String),
    /// The text of AddVip is not one `[[vip]]` entry.
    #[error("the VIP to add: {0}")]
    BadVip(String),
    /// The running config's text could not be read as TOML (it was valid
    /// when applied, so this is a fault of border-mgmt).
    #[error("the running config cannot be edited: {0}")]
    Running(String),
}

/// `text` with `edit` made, or why it cannot be.
pub fn edited(text: &str, edit: &ConfigEdit) -> Result<String, EditError> {
    let mut doc: DocumentMut = text
        .parse()
        .map_err(|e: toml_edit::TomlError| EditError::Running(one_line(&e.to_string())))?;
    match edit {
        ConfigEdit::AddBackend {
            vip,
            backend,
            weight,
            zone,
            max_connections,
        } => {
            let addr = parse_backend(backend)?;
            let entry = vip_entry(&mut doc, vip)?;
            let mut t = Table::new();
            t.insert("address", value(addr.ip().to_string()));
            t.insert("port", value(i64::from(addr.port())));
            if let Some(w) = weight {
                t.insert("weight", value(i64::from(*w)));
            }
            if let Some(z) = zone {
                t.insert("zone", value(z.as_str()));
            }
            if let Some(m) = max_connections {
                t.insert("max_connections", value(i64::from(*m)));
            }
            match entry.get_mut("backend") {
                Some(Item::ArrayOfTables(list)) => list.push(t),
                Some(_) => {
                    return Err(EditError::Running(format!(
                        "vip `{vip}`: `backend` is not written as [[vip.backend]] tables"
                    )))
                }
                None => {
                    let mut list = ArrayOfTables::new();
                    list.push(t);
                    entry.insert("backend", Item::ArrayOfTables(list));
                }
            }
        }
        ConfigEdit::RemoveBackend { vip, backend } => {
            let addr = parse_backend(backend)?;
            let entry = vip_entry(&mut doc, vip)?;
            let missing = || EditError::NoBackend {
                vip: vip.clone(),
                backend: addr,
            };
            let Some(Item::ArrayOfTables(list)) = entry.get_mut("backend") else {
                return Err(missing());
            };
            let at = list
                .iter()
                .position(|t| backend_at(t) == Some(addr))
                .ok_or_else(missing)?;
            list.remove(at);
        }
        ConfigEdit::AddVip { toml } => {
            let mut entry = lone_vip(toml)?;
            // Positions from the snippet would sort the entry among the
            // running text's first tables: without them it follows the
            // last VIP, and no other VIP changes its place (its id).
            clear_positions(&mut entry);
            match doc.get_mut("vip") {
                Some(Item::ArrayOfTables(list)) => list.push(entry),
                Some(_) => {
                    return Err(EditError::Running(
                        "`vip` is not written as [[vip]] tables".into(),
                    ))
                }
                None => {
                    let mut list = ArrayOfTables::new();
                    list.push(entry);
                    doc.insert("vip", Item::ArrayOfTables(list));
                }
            }
        }
        ConfigEdit::RemoveVip { vip } => {
            let missing = || EditError::NoVip(vip.clone());
            let list = vips(&mut doc).ok_or_else(missing)?;
            let at = list
                .iter()
                .position(|t| name_of(t) == Some(vip.as_str()))
                .ok_or_else(missing)?;
            list.remove(at);
        }
    }
    Ok(doc.to_string())
}

/// `addr:port`.
fn parse_backend(s: &str) -> Result<SocketAddr, EditError> {
    s.trim()
        .parse()
        .map_err(|_| EditError::BadAddress(s.to_string()))
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn vips(doc: &mut DocumentMut) -> Option<&mut ArrayOfTables> {
    doc.get_mut("vip").and_then(Item::as_array_of_tables_mut)
}

fn name_of(t: &Table) -> Option<&str> {
    t.get("name").and_then(Item::as_str)
}

/// The `[[vip]]` table named `name`.
fn vip_entry<'d>(doc: &'d mut DocumentMut, name: &str) -> Result<&'d mut Table, EditError> {
    vips(doc)
        .and_then(|l| l.iter_mut().find(|t| name_of(t) == Some(name)))
        .ok_or_else(|| EditError::NoVip(name.to_string()))
}

/// The address and port a `[[vip.backend]]` table names.
fn backend_at(t: &Table) -> Option<SocketAddr> {
    let ip = t.get("address")?.as_str()?.parse().ok()?;
    let port = u16::try_from(t.get("port")?.as_integer()?).ok()?;
    Some(SocketAddr::new(ip, port))
}

/// The one `[[vip]]` entry of `toml` (and nothing besides it).
fn lone_vip(toml: &str) -> Result<Table, EditError> {
    let mut doc: DocumentMut = toml
        .parse()
        .map_err(|e: toml_edit::TomlError| EditError::BadVip(one_line(&e.to_string())))?;
    if let Some((k, _)) = doc.iter().find(|(k, _)| *k != "vip") {
        return Err(EditError::BadVip(format!(
            "`{k}` is not part of a VIP (expected one [[vip]] table and its sub-tables, nothing else)"
        )));
    }
    let list = vips(&mut doc).ok_or_else(|| {
        EditError::BadVip("no [[vip]] table (expected exactly one [[vip]] table)".into())
    })?;
    if list.len() != 1 {
        return Err(EditError::BadVip(format!(
            "{} [[vip]] tables (expected exactly one)",
            list.len()
        )));
    }
    Ok(list.remove(0))
}

/// Clears the document positions of `t` and every table inside it.
fn clear_positions(t: &mut Table) {
    t.set_position(None);
    for (_, item) in t.iter_mut() {
        match item {
            Item::Table(sub) => clear_positions(sub),
            Item::ArrayOfTables(list) => list.iter_mut().for_each(clear_positions),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUNNING: &str = r#"# the lab appliance
instance = "t"

[[vip]]
name = "web"   # the shop
address = "10.1.0.100"
port = 80

[[vip.backend]]
address = "10.2.0.11"
port = 8080

[vip.health]
kind = "tcp"

[[vip]]
name = "dns"
address = "10.1.0.100"
port = 53

[mgmt]
listen = "unix:///run/border/t.sock"
"#;

    fn vips_of(text: &str) -> Vec<(String, Vec<String>)> {
        let v: toml::Value = toml::from_str(text).unwrap();
        v["vip"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                let backends = t
                    .get("backend")
                    .and_then(|b| b.as_array())
                    .map(|l| {
                        l.iter()
                            .map(|b| format!("{}:{}", b["address"].as_str().unwrap(), b["port"]))
                            .collect()
                    })
                    .unwrap_or_default();
                (t["name"].as_str().unwrap().to_string(), backends)
            })
            .collect()
    }

    fn add_backend(vip: &str, backend: &str) -> ConfigEdit {
        ConfigEdit::AddBackend {
            vip: vip.into(),
            backend: backend.into(),
            weight: Some(3),
            zone: None,
            max_connections: None,
        }
    }

    #[test]
    fn backend_added_to_its_vip_only_with_comments_kept() {
        let out = edited(RUNNING, &add_backend("web", "10.2.0.12:8080")).unwrap();
        assert_eq!(
            vips_of(&out),
            vec![
                (
                    "web".into(),
                    vec!["10.2.0.11:8080".into(), "10.2.0.12:8080".into()]
                ),
                ("dns".into(), vec![])
            ]
        );
        assert!(out.starts_with("# the lab appliance\n"));
        assert!(out.contains("name = \"web\"   # the shop\n"));
        assert!(out.contains("weight = 3"));
        let out = edited(&out, &add_backend("dns", "[fd00::1]:5353")).unwrap();
        assert_eq!(vips_of(&out)[1].1, vec!["fd00::1:5353".to_string()]);
        assert!(toml::from_str::<toml::Value>(&out).unwrap()["mgmt"]["listen"].is_str());
    }

    #[test]
    fn backend_removed_by_address_and_port() {
        let out = edited(
            RUNNING,
            &ConfigEdit::RemoveBackend {
                vip: "web".into(),
                backend: "10.2.0.11:8080".into(),
            },
        )
        .unwrap();
        assert_eq!(vips_of(&out)[0].1, Vec::<String>::new());
        assert!(out.contains("[vip.health]"));
        let e = edited(
            RUNNING,
            &ConfigEdit::RemoveBackend {
                vip: "web".into(),
                backend: "10.2.0.11:8081".into(),
            },
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "VIP `web` has no backend 10.2.0.11:8081");
    }

    #[test]
    fn unknown_vip_and_bad_address_are_named() {
        let e = edited(RUNNING, &add_backend("nope", "10.2.0.12:8080")).unwrap_err();
        assert_eq!(e.to_string(), "no VIP `nope` in the running config");
        let e = edited(RUNNING, &add_backend("web", "10.2.0.300:8080")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "backend `10.2.0.300:8080`: expected addr:port, e.g. 10.20.0.11:8080 or [2001:db8::11]:8080"
        );
        let e = edited(RUNNING, &ConfigEdit::RemoveVip { vip: "x".into() }).unwrap_err();
        assert_eq!(e, EditError::NoVip("x".into()));
    }

    #[test]
    fn vip_added_after_the_last_vip_and_removed_by_name() {
        let add = ConfigEdit::AddVip {
            toml: "[[vip]]\nname = \"api\"\naddress = \"10.1.0.101\"\nport = 443\n[[vip.backend]]\naddress = \"10.2.0.21\"\nport = 8443\n".into(),
        };
        let out = edited(RUNNING, &add).unwrap();
        assert_eq!(
            vips_of(&out),
            vec![
                ("web".into(), vec!["10.2.0.11:8080".into()]),
                ("dns".into(), vec![]),
                ("api".into(), vec!["10.2.0.21:8443".into()]),
            ]
        );
        let out = edited(&out, &ConfigEdit::RemoveVip { vip: "web".into() }).unwrap();
        let names: Vec<String> = vips_of(&out).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, vec!["dns", "api"]);
        assert!(!out.contains("[vip.health]"));
    }

    #[test]
    fn vip_text_must_be_one_vip() {
        for (toml, why) in [
            ("name = \"x\"\n", "`name` is not part of a VIP"),
            (
                "[[vip]]\nname = \"a\"\n[[vip]]\nname = \"b\"\n",
                "2 [[vip]] tables",
            ),
            ("[mgmt]\nlisten = \"x\"\n", "`mgmt` is not part of a VIP"),
            ("[[vip]\n", "TOML parse error"),
        ] {
            let e = edited(RUNNING, &ConfigEdit::AddVip { toml: toml.into() }).unwrap_err();
            assert!(
                matches!(&e, EditError::BadVip(m) if m.contains(why)),
                "{toml:?}: {e}"
            );
        }
    }
}
