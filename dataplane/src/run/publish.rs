//! Standalone mode: border-dp publishes tables built from its own config
//! file, and republishes them when SIGHUP reloads the file.

use conf::state::StateRegion;
use conf::tables::{tables_path, GenerationBuilder, TablesWriter};
use conf::Config;
use tracing::{debug, error, info, warn};

use super::{RunError, RunOptions};

/// SIGHUP: re-read the config file and, in standalone mode, publish it.
pub(super) fn reload_config(
    opts: &RunOptions,
    live: &mut Config,
    publisher: Option<&mut Publisher>,
    state: &StateRegion,
) {
    let Some(publisher) = publisher else {
        warn!("SIGHUP ignored: tables come from border-mgmt (reload it there, or run with --standalone)");
        return;
    };
    let Some(path) = &opts.config_path else {
        return;
    };
    debug!(path = %path.display(), "SIGHUP: re-reading the config file");
    let new = match Config::from_file(path) {
        Ok(c) => c,
        Err(e) => {
            error!(error = %e, "reload refused: invalid config; the running tables stay");
            return;
        }
    };
    if let Err(what) = reloadable(live, &new) {
        error!(section = %what, "reload refused: only [[vip]] changes apply without a restart");
        return;
    }
    match publisher.publish(&new, state) {
        Ok(g) => {
            info!(generation = g, "config reloaded");
            *live = new;
        }
        Err(e) => error!(error = %e, "reload failed; the running tables stay"),
    }
}

/// Arena bytes for a standalone tables region: room for every VIP block
/// several times over, so reloads never wait for reclamation.
pub(super) fn arena_bytes(cfg: &Config) -> u64 {
    let per_generation: u64 = cfg
        .vips
        .iter()
        .map(|v| {
            512 + u64::from(v.maglev_table_size) * 4
                + v.backends.len() as u64 * 32
                + v.name.len() as u64
        })
        .sum::<u64>()
        + 64
        + 32 * cfg.vips.len() as u64;
    (per_generation * 8).max(16 << 20)
}

/// The standalone publisher: builds generations from the config file.
pub(super) struct Publisher {
    writer: TablesWriter,
    builder: GenerationBuilder,
}

impl Publisher {
    pub(super) fn create(cfg: &Config) -> Result<Publisher, RunError> {
        let path = tables_path(&cfg.instance);
        let writer = TablesWriter::create(&path, arena_bytes(cfg))
            .map_err(|e| RunError::Tables(e.to_string()))?;
        Ok(Publisher {
            writer,
            builder: GenerationBuilder::new(),
        })
    }

    pub(super) fn publish(&mut self, cfg: &Config, state: &StateRegion) -> Result<u64, RunError> {
        let gen = self
            .builder
            .build(cfg, &conf::tables::no_overrides)
            .map_err(|e| RunError::Tables(e.to_string()))?;
        let quiescent: Vec<u64> = (0..state.n_workers())
            .filter_map(|w| state.worker(w))
            .map(|w| w.applied_generation())
            .collect();
        let stats = self
            .writer
            .publish(&gen, &quiescent)
            .map_err(|e| RunError::Tables(e.to_string()))?;
        info!(
            generation = stats.generation,
            blocks_written = stats.blocks_written,
            bytes_written = stats.bytes_written,
            "tables published"
        );
        Ok(stats.generation)
    }
}

/// What a reload may change: VIPs and backends. Everything else needs a restart.
pub(super) fn reloadable(old: &Config, new: &Config) -> Result<(), String> {
    if old.instance != new.instance {
        return Err("instance".into());
    }
    if old.dataplane != new.dataplane {
        return Err("[dataplane]".into());
    }
    if old.ports != new.ports {
        return Err("[[port]]".into());
    }
    Ok(())
}
