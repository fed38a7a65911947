//! Every `--help` is true: each binary's help (and each borderctl
//! subcommand's) is compared with the docs. borderctl's commands are the
//! ones docs/api.md lists, every flag a help offers is documented and every
//! documented flag exists, the docs and config sections a help names exist,
//! and no help promises a feature for later.
//!
//! Runs the binaries only with --help: no namespaces, no root.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

const BORDERCTL: &str = env!("CARGO_BIN_EXE_borderctl");
const BORDER_MGMT: &str = env!("CARGO_BIN_EXE_border-mgmt");
const BORDER_DP: &str = env!("CARGO_BIN_EXE_border-dp");
const BORDER_GW: &str = env!("CARGO_BIN_EXE_border-gw");

/// Words of a help that promise what is not there (yet).
const STALE: &[&str] = &[
    "Health checks come later",
    "come later",
    "comes later",
    "not yet",
    "not implemented",
    "unimplemented",
    "TODO",
    "for now",
];

fn repo(path: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// `program args --help`, which must succeed with the help on stdout.
fn help(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .arg("--help")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?} --help: exit {}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("Usage:"), "{program} {args:?}: {stdout}");
    stdout
}

/// The subcommands a clap help lists under `Commands:` (without `help`).
fn commands(help: &str) -> BTreeSet<String> {
    help.lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(String::from)
        .collect()
}

/// Every `--flag` in `text` (in backticks, prose or option lists).
fn long_flags(text: &str) -> BTreeSet<String> {
    let mut flags = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("--") {
        let before = rest[..i].chars().next_back();
        rest = &rest[i + 2..];
        // `a--b` or `---` is no flag.
        if before.is_some_and(|c| c.is_alphanumeric() || c == '-') {
            continue;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
            .collect();
        if name.len() > 1
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && !name.ends_with('-')
        {
            flags.insert(format!("--{name}"));
        }
    }
    flags
}

/// The flags of an option list, without clap's own.
fn offered_flags(help: &str) -> BTreeSet<String> {
    let options: String = help
        .lines()
        .filter(|l| l.trim_start().starts_with('-'))
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" ") + "\n")
        .collect();
    let mut flags = long_flags(&options);
    flags.remove("--help");
    flags.remove("--version");
    flags
}

/// The text from the heading `## title` up to the next `## ` heading.
fn section<'a>(doc: &'a str, title: &str) -> &'a str {
    let start = doc
        .find(&format!("\n## {title}\n"))
        .unwrap_or_else(|| panic!("no section `## {title}`"));
    let body = &doc[start + 1..];
    let end = body[3..].find("\n## ").map_or(body.len(), |e| e + 3);
    &body[..end]
}

/// The commands docs/api.md's borderctl table lists: the first word of every
/// backticked span in the first column (`drain VIP BACKEND`, `undrain ...`).
fn documented_commands(api_borderctl: &str) -> BTreeSet<String> {
    api_borderctl
        .lines()
        .filter(|l| l.starts_with("| `"))
        .flat_map(|l| {
            let first_cell = l.split(" | ").next().unwrap_or("");
            first_cell
                .split('`')
                .skip(1)
                .step_by(2)
                .filter_map(|span| span.split_whitespace().next())
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .collect()
}

fn borderctl_helps() -> Vec<(String, String)> {
    let top = help(BORDERCTL, &[]);
    let mut all = vec![("borderctl".to_string(), top.clone())];
    for c in commands(&top) {
        let h = help(BORDERCTL, &[&c]);
        // Commands with their own commands (`backend add`): their flags too.
        for sub in commands(&h).into_iter().filter(|s| s != "help") {
            all.push((format!("borderctl {c} {sub}"), help(BORDERCTL, &[&c, &sub])));
        }
        all.push((format!("borderctl {c}"), h));
    }
    all
}

fn all_helps() -> Vec<(String, String)> {
    let mut all = borderctl_helps();
    all.push(("border-mgmt".into(), help(BORDER_MGMT, &[])));
    all.push(("border-dp".into(), help(BORDER_DP, &[])));
    all.push(("border-gw".into(), help(BORDER_GW, &[])));
    all
}

#[test]
fn borderctl_has_the_commands_docs_api_lists() {
    let offered = commands(&help(BORDERCTL, &[]));
    assert!(
        offered.contains("status") && offered.contains("counters"),
        "{offered:?}"
    );
    let api = repo("docs/api.md");
    let documented = documented_commands(section(&api, "borderctl"));
    assert_eq!(
        offered, documented,
        "borderctl --help and docs/api.md (## borderctl) list different commands"
    );
    // The README's list of borderctl commands names only real ones.
    let readme = repo("README.md");
    for line in readme
        .lines()
        .filter(|l| l.contains("target/release/borderctl "))
    {
        let cmd = line
            .split("target/release/borderctl ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .unwrap();
        assert!(
            offered.contains(cmd),
            "README: `borderctl {cmd}` does not exist: {line}"
        );
    }
}

#[test]
fn every_borderctl_flag_is_documented_and_every_documented_flag_exists() {
    let api = repo("docs/api.md");
    let documented = long_flags(section(&api, "borderctl"));
    let mut offered = BTreeSet::new();
    for (what, h) in borderctl_helps() {
        let flags = offered_flags(&h);
        let missing: Vec<_> = flags.difference(&documented).collect();
        assert!(
            missing.is_empty(),
            "`{what} --help` offers {missing:?}, which docs/api.md (## borderctl) does not mention"
        );
        offered.extend(flags);
    }
    let unknown: Vec<_> = documented.difference(&offered).collect();
    assert!(
        unknown.is_empty(),
        "docs/api.md (## borderctl) mentions {unknown:?}, which no borderctl --help offers"
    );
    offered.extend(["--help", "--version"].map(String::from));
    let readme = repo("README.md");
    for line in readme.lines().filter(|l| l.contains("borderctl ")) {
        let unknown: Vec<_> = long_flags(line).difference(&offered).cloned().collect();
        assert!(
            unknown.is_empty(),
            "README names {unknown:?} for borderctl: {line}"
        );
    }
}

#[test]
fn border_mgmt_and_border_dp_flags_are_documented_and_exist() {
    let docs = [
        "README.md",
        "docs/api.md",
        "docs/config.md",
        "docs/architecture.md",
    ]
    .map(repo)
    .join("\n");
    for (program, bin) in [("border-mgmt", BORDER_MGMT), ("border-dp", BORDER_DP)] {
        let offered = offered_flags(&help(bin, &[]));
        assert!(offered.contains("--config") && offered.contains("--check-config"));
        flags_match_the_docs(program, &offered, &docs);
    }
}

#[test]
fn border_gw_flags_are_documented_and_exist() {
    let offered = offered_flags(&help(BORDER_GW, &[]));
    assert_eq!(
        offered,
        ["--check-config", "--config", "--log-format"]
            .map(String::from)
            .into(),
        "border-gw --help"
    );
    let docs = ["docs/fleet.md", "docs/operations.md", "README.md"]
        .map(repo)
        .join("\n");
    flags_match_the_docs("border-gw", &offered, &docs);
    // --check-config FILE (as on the other daemons) and the older
    // --config FILE --check run the same check.
    let bad = std::env::temp_dir().join(format!("border-gw-check-{}.toml", std::process::id()));
    std::fs::write(&bad, "id = \"gw1\"\nagent_listen = 5\n").unwrap();
    let run = |args: &[&std::ffi::OsStr]| {
        let out = Command::new(BORDER_GW).args(args).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let new = run(&["--check-config".as_ref(), bad.as_os_str()]);
    let old = run(&["--config".as_ref(), bad.as_os_str(), "--check".as_ref()]);
    let _ = std::fs::remove_file(&bad);
    assert_eq!(new, old);
    assert_eq!(new.0, Some(1), "{}", new.1);
    assert!(
        new.1.starts_with("border-gw: error: ") && new.1.contains("line 2"),
        "{}",
        new.1
    );
    // docs/fleet.md's section on the gateway gives every flag.
    let fleet = repo("docs/fleet.md");
    let gateway = section(&fleet, "The gateway: border-gw");
    assert!(gateway.contains("border-gw --config"));
    let given = long_flags(gateway);
    let missing: Vec<_> = offered.difference(&given).collect();
    assert!(
        missing.is_empty(),
        "docs/fleet.md (## The gateway: border-gw) does not give border-gw {missing:?}"
    );
    // Every config key the help names (`agent_listen`, `tls.api_fingerprints`)
    // is one docs/fleet.md documents.
    let h = help(BORDER_GW, &[]);
    let keys: BTreeSet<&str> = h
        .split(|c: char| !(c.is_ascii_lowercase() || c == '_' || c == '.'))
        .map(|w| w.trim_matches('.'))
        .filter(|w| w.contains('_') && !w.starts_with('_') && !w.ends_with('_'))
        .collect();
    assert!(keys.contains("agent_listen"), "{keys:?}");
    for key in keys {
        let last = key.rsplit('.').next().unwrap_or(key);
        assert!(
            gateway.contains(&format!("{last} =")) || gateway.contains(&format!("`{key}`")),
            "`border-gw --help` names {key}, which docs/fleet.md (## The gateway: border-gw) does not document"
        );
    }
}

/// Every flag `program --help` offers is in `docs`, and every
/// `program --x` / program `--x` the docs give is a flag it offers.
fn flags_match_the_docs(program: &str, offered: &BTreeSet<String>, docs: &str) {
    let documented = long_flags(docs);
    let missing: Vec<_> = offered.difference(&documented).collect();
    assert!(
        missing.is_empty(),
        "`{program} --help` offers {missing:?}: not in the docs"
    );
    for text in docs.split(program).skip(1) {
        let next = text.trim_start_matches([' ', '`']);
        if !next.starts_with("--") || text.starts_with(['-', '\'']) {
            continue;
        }
        let mut flag = long_flags(next.split_whitespace().next().unwrap());
        flag.retain(|f| f != "--help" && f != "--version");
        assert!(
            flag.is_subset(offered),
            "the docs give {program} {flag:?}, which its --help does not offer"
        );
    }
}

/// `--version` of every binary: the crate version, the commit it was built
/// from, the DPDK release and the shared-memory layout versions.
#[test]
fn every_version_names_commit_dpdk_and_layouts() {
    let layouts = format!(
        "shared memory layouts: state {}, tables {}, records {}, flows {}, carry {}, conns {}",
        conf::state::STATE_LAYOUT_VERSION,
        conf::tables::TABLES_LAYOUT_VERSION,
        conf::records::RECORDS_LAYOUT_VERSION,
        dataplane::flows_region::FLOWS_LAYOUT_VERSION,
        dataplane::carry_region::CARRY_LAYOUT_VERSION,
        conf::conns::CONNS_LAYOUT_VERSION
    );
    for (name, bin) in [
        ("border-dp", BORDER_DP),
        ("border-mgmt", BORDER_MGMT),
        ("border-gw", BORDER_GW),
        ("borderctl", BORDERCTL),
    ] {
        let out = Command::new(bin).arg("--version").output().unwrap();
        assert!(out.status.success(), "{name} --version: {}", out.status);
        let text = String::from_utf8(out.stdout).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines.first().copied(),
            Some(format!("{name} {}", env!("CARGO_PKG_VERSION")).as_str()),
            "{text}"
        );
        let commit = lines
            .iter()
            .find_map(|l| l.strip_prefix("commit "))
            .unwrap_or_else(|| panic!("{name}: no commit line in {text}"));
        assert!(
            commit.len() >= 7 && commit.chars().all(|c| c.is_ascii_hexdigit()),
            "{name}: commit {commit:?} is not a git hash (built outside a checkout?)"
        );
        let dpdk = lines
            .iter()
            .find(|l| l.contains("DPDK 22.11"))
            .unwrap_or_else(|| panic!("{name}: no DPDK line in {text}"));
        if name == "border-dp" {
            assert!(dpdk.contains("(loaded; built with 22.11"), "{dpdk}");
        } else {
            assert!(dpdk.starts_with("built with DPDK 22.11"), "{dpdk}");
        }
        assert!(lines.contains(&layouts.as_str()), "{name}: {text}");
        // -V: one line, version and commit.
        let short = Command::new(bin).arg("-V").output().unwrap();
        assert_eq!(
            String::from_utf8(short.stdout).unwrap(),
            format!("{name} {} ({commit})\n", env!("CARGO_PKG_VERSION"))
        );
    }
}

#[test]
fn no_help_promises_a_missing_feature() {
    for (what, h) in all_helps() {
        for phrase in STALE {
            assert!(
                !h.to_lowercase().contains(&phrase.to_lowercase()),
                "`{what} --help` says {phrase:?}:\n{h}"
            );
        }
    }
}

#[test]
fn the_docs_and_config_sections_a_help_names_exist() {
    let config_md = repo("docs/config.md");
    let ctl_commands = commands(&help(BORDERCTL, &[]));
    for (what, h) in all_helps() {
        // `borderctl <command>`: a command borderctl has.
        for piece in h.split("borderctl ").skip(1) {
            // A command's name may have a dash (`man-pages`); a flag
            // (`borderctl --help`) is no command.
            let word: String = piece
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '-')
                .collect();
            let word = word.trim_end_matches('-').to_string();
            assert!(
                word.is_empty() || word.starts_with('-') || ctl_commands.contains(&word),
                "`{what} --help` names `borderctl {word}`, which does not exist"
            );
        }
        // docs/<name>.md
        for piece in h.split("docs/").skip(1) {
            let name: String = piece
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
                .collect();
            let path = format!("docs/{name}.md");
            assert!(
                piece.starts_with(&format!("{name}.md"))
                    && Path::new(env!("CARGO_MANIFEST_DIR")).join(&path).exists(),
                "`{what} --help` names docs/{piece:.20}…, which does not exist"
            );
        }
        // [section] and [section].key of the config: in docs/config.md.
        for piece in h.split('[').skip(1) {
            let Some(end) = piece.find(']') else { continue };
            let name = &piece[..end];
            let is_section = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '.' || c == '_');
            if is_section {
                assert!(
                    config_md.contains(&format!("[{name}]")),
                    "`{what} --help` names the config section [{name}], which docs/config.md does not document"
                );
            }
        }
    }
}

#[test]
fn the_help_checks_catch_what_they_should() {
    // The parsers the tests above rely on, on known text.
    assert_eq!(
        long_flags("`--dry-run`, --all; a--b ---x --x-"),
        ["--all", "--dry-run"].map(String::from).into()
    );
    let table = "| `status` | x |\n| `drain VIP BACKEND [--note T]`, `undrain VIP` | y |";
    assert_eq!(
        documented_commands(table),
        ["drain", "status", "undrain"].map(String::from).into()
    );
    let h = "Usage: x\n\nCommands:\n  a  one\n  help  h\n\nOptions:\n      --x-y <N>  the --z\n  -h, --help  help\n";
    assert_eq!(commands(h), ["a"].map(String::from).into());
    assert_eq!(offered_flags(h), ["--x-y"].map(String::from).into());
}
