//! The traffic profiles in `perf/profiles/` parse. They drive TRex and
//! pktgen-dpdk on real NICs and cannot run here, so the suite checks what it
//! can: every `.py` compiles with `python3` (into a scratch directory: no
//! `__pycache__` left in the tree) and has no undefined name or unused
//! import by `pyflakes3` (the profiles import TRex's API names one by one,
//! so a missing import shows here, not on the traffic generator), and every
//! `.lua` passes `luac5.4 -p`. The tools come from Debian (`python3`,
//! `pyflakes3`, `lua5.4`; `scripts/install-deps.sh`). A missing tool or a
//! folder with fewer profiles than listed fails the test rather than
//! passing it vacuously.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Debian 12's `lua5.4` ships `luac5.4`; plain `luac` is an alternatives
/// link that may point at another Lua version, so the versioned name is used.
const LUAC: &str = "luac5.4";
const PYTHON: &str = "python3";
const PYFLAKES: &str = "pyflakes3";
/// Compiles `argv[1]` to `argv[2]`; on a syntax error prints where and why
/// in one line (not a traceback of py_compile itself) and exits 1.
const PY_COMPILE: &str = "import py_compile, sys
try:
    py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True)
except py_compile.PyCompileError as e:
    sys.exit(f'{e.exc_type_name}: {e.exc_value}')";

/// The profiles that must be there (paths under `perf/profiles/`).
const EXPECTED: &[&str] = &[
    "trex/stl_udp_flood.py",
    "trex/stl_syn_flood.py",
    "trex/stl_established_mix.py",
    "trex/astf_http.py",
    "pktgen/udp_flood.lua",
    "pktgen/syn_flood.lua",
    "pktgen/established_mix.lua",
];

fn profiles_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles")
}

/// A directory under the system temp dir, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("border-profiles-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create scratch dir");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs a checker; a checker that cannot be started fails the test.
fn run(cmd: &mut Command, tool: &str) -> Output {
    cmd.output().unwrap_or_else(|e| {
        panic!("cannot run {tool}: {e} (install it with scripts/install-deps.sh)")
    })
}

/// `Err` names the file and carries the checker's message.
fn verdict(file: &Path, out: Output) -> Result<(), String> {
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    Err(format!(
        "{}: {}",
        file.display(),
        format!("{stderr}{stdout}").trim()
    ))
}

fn check_python(file: &Path, scratch: &Path) -> Result<(), String> {
    let cfile = scratch.join("check.pyc");
    let out = run(
        Command::new(PYTHON)
            .args(["-c", PY_COMPILE])
            .arg(file)
            .arg(&cfile)
            // Neither the interpreter's own imports nor anything else may
            // write bytecode next to the profiles.
            .env("PYTHONDONTWRITEBYTECODE", "1"),
        PYTHON,
    );
    verdict(file, out)
}

/// pyflakes reads the source without importing it: TRex's modules need not
/// be installed.
fn check_python_names(file: &Path) -> Result<(), String> {
    let out = run(Command::new(PYFLAKES).arg(file), PYFLAKES);
    verdict(file, out)
}

fn check_lua(file: &Path) -> Result<(), String> {
    let out = run(Command::new(LUAC).arg("-p").arg(file), LUAC);
    verdict(file, out)
}

/// Every file under `dir` (recursively) whose name ends in `.ext`, sorted.
fn files_with_extension(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        let entries = std::fs::read_dir(&d).unwrap_or_else(|e| panic!("read {}: {e}", d.display()));
        for entry in entries {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == ext) {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

#[test]
fn every_profile_parses() {
    let dir = profiles_dir();
    for name in EXPECTED {
        assert!(
            dir.join(name).is_file(),
            "missing profile perf/profiles/{name}"
        );
    }
    let python = files_with_extension(&dir, "py");
    let lua = files_with_extension(&dir, "lua");
    let expected_py = EXPECTED.iter().filter(|n| n.ends_with(".py")).count();
    let expected_lua = EXPECTED.len() - expected_py;
    assert!(
        python.len() >= expected_py && lua.len() >= expected_lua,
        "found {} .py and {} .lua profiles in {}, expected at least {expected_py} and {expected_lua}",
        python.len(),
        lua.len(),
        dir.display()
    );

    let scratch = Scratch::new("all");
    let failures: Vec<String> = python
        .iter()
        .map(|f| check_python(f, &scratch.0).and_then(|()| check_python_names(f)))
        .chain(lua.iter().map(|f| check_lua(f)))
        .filter_map(Result::err)
        .collect();
    assert!(
        failures.is_empty(),
        "profiles that do not parse:\n{}",
        failures.join("\n")
    );
    let caches = files_with_extension(&dir, "pyc");
    assert!(caches.is_empty(), "bytecode left in the tree: {caches:?}");
}

#[test]
fn a_broken_python_profile_is_reported_by_name() {
    let scratch = Scratch::new("py");
    let good = scratch.0.join("good.py");
    let broken = scratch.0.join("broken_profile.py");
    std::fs::write(&good, "def register():\n    return None\n").unwrap();
    std::fs::write(&broken, "def register(:\n    return None\n").unwrap();

    assert_eq!(check_python(&good, &scratch.0), Ok(()));
    let err = check_python(&broken, &scratch.0).expect_err("a syntax error must be reported");
    assert!(err.contains("broken_profile.py"), "{err}");
    assert!(err.contains("SyntaxError"), "{err}");
}

#[test]
fn an_undefined_name_in_a_python_profile_is_reported_by_name() {
    let scratch = Scratch::new("names");
    let good = scratch.0.join("good.py");
    let missing_import = scratch.0.join("missing_import.py");
    std::fs::write(&good, "import os\n\nprint(os.sep)\n").unwrap();
    // Compiles fine; fails only where TRex would run it.
    std::fs::write(&missing_import, "def register():\n    return STLStream()\n").unwrap();

    assert_eq!(check_python_names(&good), Ok(()));
    assert_eq!(check_python(&missing_import, &scratch.0), Ok(()));
    let err = check_python_names(&missing_import).expect_err("an undefined name must be reported");
    assert!(err.contains("missing_import.py"), "{err}");
    assert!(err.contains("undefined name 'STLStream'"), "{err}");
}

#[test]
fn a_broken_lua_profile_is_reported_by_name() {
    let scratch = Scratch::new("lua");
    let good = scratch.0.join("good.lua");
    let broken = scratch.0.join("broken_profile.lua");
    std::fs::write(&good, "local rate = 10\nprint(rate)\n").unwrap();
    std::fs::write(&broken, "local rate = \nif rate then\n").unwrap();

    assert_eq!(check_lua(&good), Ok(()));
    let err = check_lua(&broken).expect_err("a syntax error must be reported");
    assert!(err.contains("broken_profile.lua"), "{err}");
}
