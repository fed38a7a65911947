//! The border-gw process: binds both listeners, follows the registry,
//! serves until SIGINT/SIGTERM, then drains: stops accepting, tells every
//! tunnel to close (agents reconnect elsewhere without backing off),
//! removes its registry entries.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::GwConfig;
use crate::forward::Gateway;
use crate::registry::Registry;
use crate::tunnels::Tunnels;

/// How long a drain waits for busy tunnels to finish their calls.
const DRAIN_GRACE: Duration = Duration::from_secs(3);

async fn bind(what: &str, addr: std::net::SocketAddr) -> Result<TcpListener, String> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {what} {addr}: {e}"))
}

/// Runs the gateway until a signal; errors are one line.
pub async fn run(cfg: GwConfig) -> Result<(), String> {
    use tokio::signal::unix::{signal, SignalKind};
    let sig = |k| signal(k).map_err(|e| format!("cannot install signal handlers: {e}"));
    let (mut int, mut term) = (sig(SignalKind::interrupt())?, sig(SignalKind::terminate())?);
    let cfg = Arc::new(cfg);
    let agent_tls = crate::tls::server_config(&cfg, mgmt::agent::ALPN)?;
    let api_tls = crate::tls::server_config(&cfg, b"h2")?;
    let peer_tls = crate::tls::peer_client_config(&cfg)?;
    let agents = bind("agent_listen", cfg.agent_listen).await?;
    let api = bind("api_listen", cfg.api_listen).await?;
    let metrics = match cfg.metrics_listen {
        Some(m) => Some(bind("metrics_listen", m).await?),
        None => None,
    };
    let tunnels = Arc::new(Tunnels::default());
    let redis_tls = match &cfg.redis_ca {
        Some(ca) => Some(crate::redis_conn::tls_connector(ca, &cfg.cert, &cfg.key)?),
        None => None,
    };
    let refusals = Arc::new(crate::limits::Refusals::default());
    let registry = Arc::new(Registry::new(
        &cfg.redis,
        redis_tls,
        &cfg.id,
        cfg.advertise,
        cfg.registry_ttl,
    )?);
    let gw = Arc::new(Gateway {
        cfg: cfg.clone(),
        tunnels: tunnels.clone(),
        registry: registry.clone(),
        peers: Arc::new(crate::peers::Peers::new(peer_tls, cfg.peers.clone())),
        stats: Arc::default(),
        refusals: refusals.clone(),
        budget: Arc::new(mgmt::budget::ByteBudget::new(
            cfg.limits.request_memory_mib,
            cfg.limits.operator_reserve_mib,
        )),
        proxy: crate::proxied::ProxyAccept::new(cfg.limits.handshake_timeout),
    });
    let (stop_tx, stop) = watch::channel(false);
    if let Some(listener) = metrics {
        let serve =
            crate::metrics::serve(listener, gw.clone(), cfg.metrics_connections, stop.clone());
        tokio::spawn(serve);
    }
    let accepting = [
        tokio::spawn(crate::agents::accept(
            agents,
            agent_tls,
            cfg.clone(),
            tunnels.clone(),
            refusals,
            gw.proxy.agent.clone(),
            stop.clone(),
        )),
        tokio::spawn(crate::api::accept(api, api_tls, gw, stop.clone())),
    ];
    let follow = tokio::spawn(registry.follow(tunnels.clone(), stop));
    tracing::info!(
        id = %cfg.id,
        agent_listen = %cfg.agent_listen,
        api_listen = %cfg.api_listen,
        metrics_listen = %cfg.metrics_listen.map_or("none".to_string(), |m| m.to_string()),
        advertise = %cfg.advertise,
        appliances = cfg.appliances.len(),
        peers = cfg.peers.len(),
        redis = %cfg.redis,
        "border-gw running"
    );
    // The service manager (systemd Type=notify): ready now that every
    // listener is bound; the watchdog pings come from this task's loop.
    let mut notify = conf::os::notify::ServiceNotify::from_env();
    notify.ready("accepting tunnels and calls");
    let mut watchdog =
        tokio::time::interval(notify.watchdog().unwrap_or(Duration::from_secs(3600)));
    watchdog.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = watchdog.tick() => notify.ping(),
            _ = int.recv() => break,
            _ = term.recv() => break,
        }
    }
    notify.stopping("draining tunnels");
    let _ = stop_tx.send(true);
    for a in accepting {
        let _ = a.await;
    }
    let idle = tunnels.drain();
    tracing::info!(
        idle_tunnels = idle,
        "border-gw draining: tunnels told to close"
    );
    let start = Instant::now();
    while !tunnels.counts().is_empty() && start.elapsed() < DRAIN_GRACE {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = tokio::time::timeout(Duration::from_secs(2), follow).await;
    Ok(())
}
