# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_borderctl_global_optspecs
    string join \n json server= config= instance= cert= key= ca= server-name= gateway= appliance= timeout-ms= h/help V/version
end

function __fish_borderctl_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_borderctl_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_borderctl_using_subcommand
    set -l cmd (__fish_borderctl_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c borderctl -n "__fish_borderctl_needs_command" -l server -d 'border-mgmt\'s API: unix:///path or tcp://ip:port' -r
complete -c borderctl -n "__fish_borderctl_needs_command" -l config -d 'The config file: its [mgmt].listen (and its instance, for the state region)' -r -F
complete -c borderctl -n "__fish_borderctl_needs_command" -l instance -d 'The instance: its default socket unix:///run/border/NAME.sock (and its state region)' -r
complete -c borderctl -n "__fish_borderctl_needs_command" -l cert -d 'Client certificate (PEM) for a tcp:// server; pinned on the server' -r -F
complete -c borderctl -n "__fish_borderctl_needs_command" -l key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_needs_command" -l ca -d 'CA of the server\'s certificate (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_needs_command" -l server-name -d 'Name to verify the server\'s certificate against (default: its IP address)' -r
complete -c borderctl -n "__fish_borderctl_needs_command" -l gateway -d 'Reach the appliance through this border-gw (tcp://ip:port, mutual TLS with --cert/--key/--ca); needs --appliance. See docs/fleet.md' -r
complete -c borderctl -n "__fish_borderctl_needs_command" -l appliance -d 'The appliance to call through --gateway (its [mgmt.agent].id)' -r
complete -c borderctl -n "__fish_borderctl_needs_command" -l timeout-ms -d 'How long to wait for border-mgmt, to connect and for each answer (`10s`, `500ms`; a bare number is milliseconds)' -r
complete -c borderctl -n "__fish_borderctl_needs_command" -l json -d 'Machine-readable JSON instead of text (`events`: one object per line)'
complete -c borderctl -n "__fish_borderctl_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c borderctl -n "__fish_borderctl_needs_command" -s V -l version -d 'Print version'
complete -c borderctl -n "__fish_borderctl_needs_command" -f -a "status" -d 'Publisher, dataplane workers and every VIP backend with its state and reason'
complete -c borderctl -n "__fish_borderctl_needs_command" -f -a "apply" -d 'Apply a whole config file (validated, atomic; only [[vip]] and zone change at run time)'
complete -c borderctl -n "__fish_borderctl_needs_command" -f -a "config" -d 'The running config'
complete -c borderctl -n "__fish_borderctl_needs_command" -f -a "health" -d 'Every backend of every VIP: its health verdict, each checker\'s last observation, and the quorum'
complete -c borderctl -n "__fish_borderctl_needs_command" -f -a "drain" -d 'Drain a backend: no new connections; open ones finish'
complete -c borderctl -n "__fish_borderctl_needs_command" -f -a "undrain" -d 'Undo a drain'
complete -c borderctl -n "__fish_borderctl_needs_command" -f -a "weight" -d 'Set a backend\'s weight (0..=65535; 0 takes it out of the ring), or `reset` to the configured weight'
complete -c borderctl -n "__fish_borderctl_needs_command" -f -a "backend" -d 'Add or remove one backend of a VIP in the running config; disable (drain, or --kill its connections) or enable one'
complete -c borderctl -n "__fish_borderctl_needs_command" -f -a "vip" -d 'Add or remove one VIP of the running config'
complete -c borderctl -n "__fish_borderctl_needs_command" -f -a "stats" -d 'Dataplane counters per worker and totals, and per-VIP / per-backend flow statistics'
complete -c borderctl -n "__fish_borderctl_needs_command" -f -a "events" -d 'Follow border-mgmt\'s events (publishes, refused tables, worker liveness, config and backend changes, health) from now on, one line each'
complete -c borderctl -n "__fish_borderctl_needs_command" -f -a "conns" -d 'The live connections border-dp\'s workers hold: client, VIP, backend, local tuple, state, age, packets and bytes each way, PROXY v2 status'
complete -c borderctl -n "__fish_borderctl_needs_command" -f -a "maintenance" -d 'BGP maintenance: `on` withdraws every VIP route from the routers (within 1 s) while border-dp keeps forwarding the connections already established; `off` announces them again'
complete -c borderctl -n "__fish_borderctl_needs_command" -f -a "log-level" -d 'Set the log level of border-mgmt or border-dp while it runs'
complete -c borderctl -n "__fish_borderctl_needs_command" -f -a "diag" -d 'Name the typical problems, each with its evidence and the next command'
complete -c borderctl -n "__fish_borderctl_needs_command" -f -a "counters" -d 'Per-worker dataplane counters and their totals, and each port\'s NIC statistics, read from border-dp\'s state region on this machine (without border-mgmt)'
complete -c borderctl -n "__fish_borderctl_needs_command" -f -a "capture" -d 'Capture packets of border-dp\'s ports into a pcapng file (tcpdump -r, Wireshark), with a tcpdump filter expression'
complete -c borderctl -n "__fish_borderctl_needs_command" -f -a "completions" -d 'Print the shell completion script for bash, zsh or fish'
complete -c borderctl -n "__fish_borderctl_needs_command" -f -a "man-pages" -d 'Write the man pages of borderctl (and each of its commands), border-dp, border-mgmt and border-gw into DIR'
complete -c borderctl -n "__fish_borderctl_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c borderctl -n "__fish_borderctl_using_subcommand status" -l sample-ms -d 'With the state region: how long to watch the heartbeats (`300ms`, `1s`; a bare number is milliseconds)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand status" -l server -d 'border-mgmt\'s API: unix:///path or tcp://ip:port' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand status" -l config -d 'The config file: its [mgmt].listen (and its instance, for the state region)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand status" -l instance -d 'The instance: its default socket unix:///run/border/NAME.sock (and its state region)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand status" -l cert -d 'Client certificate (PEM) for a tcp:// server; pinned on the server' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand status" -l key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand status" -l ca -d 'CA of the server\'s certificate (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand status" -l server-name -d 'Name to verify the server\'s certificate against (default: its IP address)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand status" -l gateway -d 'Reach the appliance through this border-gw (tcp://ip:port, mutual TLS with --cert/--key/--ca); needs --appliance. See docs/fleet.md' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand status" -l appliance -d 'The appliance to call through --gateway (its [mgmt.agent].id)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand status" -l timeout-ms -d 'How long to wait for border-mgmt, to connect and for each answer (`10s`, `500ms`; a bare number is milliseconds)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand status" -l local -d 'Read border-dp\'s state region on this machine; do not ask border-mgmt'
complete -c borderctl -n "__fish_borderctl_using_subcommand status" -l json -d 'Machine-readable JSON instead of text (`events`: one object per line)'
complete -c borderctl -n "__fish_borderctl_using_subcommand status" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c borderctl -n "__fish_borderctl_using_subcommand apply" -l server -d 'border-mgmt\'s API: unix:///path or tcp://ip:port' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand apply" -l config -d 'The config file: its [mgmt].listen (and its instance, for the state region)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand apply" -l instance -d 'The instance: its default socket unix:///run/border/NAME.sock (and its state region)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand apply" -l cert -d 'Client certificate (PEM) for a tcp:// server; pinned on the server' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand apply" -l key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand apply" -l ca -d 'CA of the server\'s certificate (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand apply" -l server-name -d 'Name to verify the server\'s certificate against (default: its IP address)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand apply" -l gateway -d 'Reach the appliance through this border-gw (tcp://ip:port, mutual TLS with --cert/--key/--ca); needs --appliance. See docs/fleet.md' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand apply" -l appliance -d 'The appliance to call through --gateway (its [mgmt.agent].id)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand apply" -l timeout-ms -d 'How long to wait for border-mgmt, to connect and for each answer (`10s`, `500ms`; a bare number is milliseconds)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand apply" -l dry-run -d 'Validate only (including what would need a restart); apply nothing'
complete -c borderctl -n "__fish_borderctl_using_subcommand apply" -l json -d 'Machine-readable JSON instead of text (`events`: one object per line)'
complete -c borderctl -n "__fish_borderctl_using_subcommand apply" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c borderctl -n "__fish_borderctl_using_subcommand config; and not __fish_seen_subcommand_from show help" -l server -d 'border-mgmt\'s API: unix:///path or tcp://ip:port' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand config; and not __fish_seen_subcommand_from show help" -l config -d 'The config file: its [mgmt].listen (and its instance, for the state region)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand config; and not __fish_seen_subcommand_from show help" -l instance -d 'The instance: its default socket unix:///run/border/NAME.sock (and its state region)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand config; and not __fish_seen_subcommand_from show help" -l cert -d 'Client certificate (PEM) for a tcp:// server; pinned on the server' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand config; and not __fish_seen_subcommand_from show help" -l key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand config; and not __fish_seen_subcommand_from show help" -l ca -d 'CA of the server\'s certificate (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand config; and not __fish_seen_subcommand_from show help" -l server-name -d 'Name to verify the server\'s certificate against (default: its IP address)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand config; and not __fish_seen_subcommand_from show help" -l gateway -d 'Reach the appliance through this border-gw (tcp://ip:port, mutual TLS with --cert/--key/--ca); needs --appliance. See docs/fleet.md' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand config; and not __fish_seen_subcommand_from show help" -l appliance -d 'The appliance to call through --gateway (its [mgmt.agent].id)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand config; and not __fish_seen_subcommand_from show help" -l timeout-ms -d 'How long to wait for border-mgmt, to connect and for each answer (`10s`, `500ms`; a bare number is milliseconds)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand config; and not __fish_seen_subcommand_from show help" -l json -d 'Machine-readable JSON instead of text (`events`: one object per line)'
complete -c borderctl -n "__fish_borderctl_using_subcommand config; and not __fish_seen_subcommand_from show help" -s h -l help -d 'Print help'
complete -c borderctl -n "__fish_borderctl_using_subcommand config; and not __fish_seen_subcommand_from show help" -f -a "show" -d 'Print the config border-mgmt runs, as TOML, with its source (the file, or `<api>` for a config applied with `borderctl apply`) and when it was applied, as comment lines above it'
complete -c borderctl -n "__fish_borderctl_using_subcommand config; and not __fish_seen_subcommand_from show help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c borderctl -n "__fish_borderctl_using_subcommand config; and __fish_seen_subcommand_from show" -l server -d 'border-mgmt\'s API: unix:///path or tcp://ip:port' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand config; and __fish_seen_subcommand_from show" -l config -d 'The config file: its [mgmt].listen (and its instance, for the state region)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand config; and __fish_seen_subcommand_from show" -l instance -d 'The instance: its default socket unix:///run/border/NAME.sock (and its state region)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand config; and __fish_seen_subcommand_from show" -l cert -d 'Client certificate (PEM) for a tcp:// server; pinned on the server' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand config; and __fish_seen_subcommand_from show" -l key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand config; and __fish_seen_subcommand_from show" -l ca -d 'CA of the server\'s certificate (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand config; and __fish_seen_subcommand_from show" -l server-name -d 'Name to verify the server\'s certificate against (default: its IP address)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand config; and __fish_seen_subcommand_from show" -l gateway -d 'Reach the appliance through this border-gw (tcp://ip:port, mutual TLS with --cert/--key/--ca); needs --appliance. See docs/fleet.md' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand config; and __fish_seen_subcommand_from show" -l appliance -d 'The appliance to call through --gateway (its [mgmt.agent].id)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand config; and __fish_seen_subcommand_from show" -l timeout-ms -d 'How long to wait for border-mgmt, to connect and for each answer (`10s`, `500ms`; a bare number is milliseconds)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand config; and __fish_seen_subcommand_from show" -l json -d 'Machine-readable JSON instead of text (`events`: one object per line)'
complete -c borderctl -n "__fish_borderctl_using_subcommand config; and __fish_seen_subcommand_from show" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c borderctl -n "__fish_borderctl_using_subcommand config; and __fish_seen_subcommand_from help" -f -a "show" -d 'Print the config border-mgmt runs, as TOML, with its source (the file, or `<api>` for a config applied with `borderctl apply`) and when it was applied, as comment lines above it'
complete -c borderctl -n "__fish_borderctl_using_subcommand config; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c borderctl -n "__fish_borderctl_using_subcommand health" -l server -d 'border-mgmt\'s API: unix:///path or tcp://ip:port' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand health" -l config -d 'The config file: its [mgmt].listen (and its instance, for the state region)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand health" -l instance -d 'The instance: its default socket unix:///run/border/NAME.sock (and its state region)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand health" -l cert -d 'Client certificate (PEM) for a tcp:// server; pinned on the server' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand health" -l key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand health" -l ca -d 'CA of the server\'s certificate (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand health" -l server-name -d 'Name to verify the server\'s certificate against (default: its IP address)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand health" -l gateway -d 'Reach the appliance through this border-gw (tcp://ip:port, mutual TLS with --cert/--key/--ca); needs --appliance. See docs/fleet.md' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand health" -l appliance -d 'The appliance to call through --gateway (its [mgmt.agent].id)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand health" -l timeout-ms -d 'How long to wait for border-mgmt, to connect and for each answer (`10s`, `500ms`; a bare number is milliseconds)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand health" -l json -d 'Machine-readable JSON instead of text (`events`: one object per line)'
complete -c borderctl -n "__fish_borderctl_using_subcommand health" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c borderctl -n "__fish_borderctl_using_subcommand drain" -l note -d 'Text kept with the override and shown in the reason' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand drain" -l server -d 'border-mgmt\'s API: unix:///path or tcp://ip:port' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand drain" -l config -d 'The config file: its [mgmt].listen (and its instance, for the state region)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand drain" -l instance -d 'The instance: its default socket unix:///run/border/NAME.sock (and its state region)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand drain" -l cert -d 'Client certificate (PEM) for a tcp:// server; pinned on the server' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand drain" -l key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand drain" -l ca -d 'CA of the server\'s certificate (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand drain" -l server-name -d 'Name to verify the server\'s certificate against (default: its IP address)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand drain" -l gateway -d 'Reach the appliance through this border-gw (tcp://ip:port, mutual TLS with --cert/--key/--ca); needs --appliance. See docs/fleet.md' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand drain" -l appliance -d 'The appliance to call through --gateway (its [mgmt.agent].id)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand drain" -l timeout-ms -d 'How long to wait for border-mgmt, to connect and for each answer (`10s`, `500ms`; a bare number is milliseconds)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand drain" -l json -d 'Machine-readable JSON instead of text (`events`: one object per line)'
complete -c borderctl -n "__fish_borderctl_using_subcommand drain" -s h -l help -d 'Print help'
complete -c borderctl -n "__fish_borderctl_using_subcommand undrain" -l note -d 'Text kept with the override and shown in the reason' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand undrain" -l server -d 'border-mgmt\'s API: unix:///path or tcp://ip:port' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand undrain" -l config -d 'The config file: its [mgmt].listen (and its instance, for the state region)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand undrain" -l instance -d 'The instance: its default socket unix:///run/border/NAME.sock (and its state region)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand undrain" -l cert -d 'Client certificate (PEM) for a tcp:// server; pinned on the server' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand undrain" -l key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand undrain" -l ca -d 'CA of the server\'s certificate (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand undrain" -l server-name -d 'Name to verify the server\'s certificate against (default: its IP address)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand undrain" -l gateway -d 'Reach the appliance through this border-gw (tcp://ip:port, mutual TLS with --cert/--key/--ca); needs --appliance. See docs/fleet.md' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand undrain" -l appliance -d 'The appliance to call through --gateway (its [mgmt.agent].id)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand undrain" -l timeout-ms -d 'How long to wait for border-mgmt, to connect and for each answer (`10s`, `500ms`; a bare number is milliseconds)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand undrain" -l json -d 'Machine-readable JSON instead of text (`events`: one object per line)'
complete -c borderctl -n "__fish_borderctl_using_subcommand undrain" -s h -l help -d 'Print help'
complete -c borderctl -n "__fish_borderctl_using_subcommand weight" -l note -d 'Text kept with the override and shown in the reason' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand weight" -l server -d 'border-mgmt\'s API: unix:///path or tcp://ip:port' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand weight" -l config -d 'The config file: its [mgmt].listen (and its instance, for the state region)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand weight" -l instance -d 'The instance: its default socket unix:///run/border/NAME.sock (and its state region)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand weight" -l cert -d 'Client certificate (PEM) for a tcp:// server; pinned on the server' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand weight" -l key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand weight" -l ca -d 'CA of the server\'s certificate (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand weight" -l server-name -d 'Name to verify the server\'s certificate against (default: its IP address)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand weight" -l gateway -d 'Reach the appliance through this border-gw (tcp://ip:port, mutual TLS with --cert/--key/--ca); needs --appliance. See docs/fleet.md' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand weight" -l appliance -d 'The appliance to call through --gateway (its [mgmt.agent].id)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand weight" -l timeout-ms -d 'How long to wait for border-mgmt, to connect and for each answer (`10s`, `500ms`; a bare number is milliseconds)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand weight" -l json -d 'Machine-readable JSON instead of text (`events`: one object per line)'
complete -c borderctl -n "__fish_borderctl_using_subcommand weight" -s h -l help -d 'Print help'
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and not __fish_seen_subcommand_from add remove disable enable help" -l server -d 'border-mgmt\'s API: unix:///path or tcp://ip:port' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and not __fish_seen_subcommand_from add remove disable enable help" -l config -d 'The config file: its [mgmt].listen (and its instance, for the state region)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and not __fish_seen_subcommand_from add remove disable enable help" -l instance -d 'The instance: its default socket unix:///run/border/NAME.sock (and its state region)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and not __fish_seen_subcommand_from add remove disable enable help" -l cert -d 'Client certificate (PEM) for a tcp:// server; pinned on the server' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and not __fish_seen_subcommand_from add remove disable enable help" -l key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and not __fish_seen_subcommand_from add remove disable enable help" -l ca -d 'CA of the server\'s certificate (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and not __fish_seen_subcommand_from add remove disable enable help" -l server-name -d 'Name to verify the server\'s certificate against (default: its IP address)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and not __fish_seen_subcommand_from add remove disable enable help" -l gateway -d 'Reach the appliance through this border-gw (tcp://ip:port, mutual TLS with --cert/--key/--ca); needs --appliance. See docs/fleet.md' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and not __fish_seen_subcommand_from add remove disable enable help" -l appliance -d 'The appliance to call through --gateway (its [mgmt.agent].id)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and not __fish_seen_subcommand_from add remove disable enable help" -l timeout-ms -d 'How long to wait for border-mgmt, to connect and for each answer (`10s`, `500ms`; a bare number is milliseconds)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and not __fish_seen_subcommand_from add remove disable enable help" -l json -d 'Machine-readable JSON instead of text (`events`: one object per line)'
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and not __fish_seen_subcommand_from add remove disable enable help" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and not __fish_seen_subcommand_from add remove disable enable help" -f -a "add" -d 'Add a backend to a VIP ([[vip.backend]] with these keys)'
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and not __fish_seen_subcommand_from add remove disable enable help" -f -a "remove" -d 'Remove a backend from a VIP; its open connections are no longer forwarded'
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and not __fish_seen_subcommand_from add remove disable enable help" -f -a "disable" -d 'Take a backend out of the ring: as `drain` (open connections finish), or with --kill also reset every connection it holds'
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and not __fish_seen_subcommand_from add remove disable enable help" -f -a "enable" -d 'Undo `backend disable` (with or without --kill) and `drain`: the backend takes new connections again'
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and not __fish_seen_subcommand_from add remove disable enable help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from add" -l weight -d 'Weight 0..=65535 (default 1)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from add" -l zone -d 'The backend\'s zone' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from add" -l max-connections -d 'Open connections at most (default: no limit)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from add" -l server -d 'border-mgmt\'s API: unix:///path or tcp://ip:port' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from add" -l config -d 'The config file: its [mgmt].listen (and its instance, for the state region)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from add" -l instance -d 'The instance: its default socket unix:///run/border/NAME.sock (and its state region)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from add" -l cert -d 'Client certificate (PEM) for a tcp:// server; pinned on the server' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from add" -l key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from add" -l ca -d 'CA of the server\'s certificate (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from add" -l server-name -d 'Name to verify the server\'s certificate against (default: its IP address)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from add" -l gateway -d 'Reach the appliance through this border-gw (tcp://ip:port, mutual TLS with --cert/--key/--ca); needs --appliance. See docs/fleet.md' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from add" -l appliance -d 'The appliance to call through --gateway (its [mgmt.agent].id)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from add" -l timeout-ms -d 'How long to wait for border-mgmt, to connect and for each answer (`10s`, `500ms`; a bare number is milliseconds)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from add" -l dry-run -d 'Validate only; apply nothing'
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from add" -l json -d 'Machine-readable JSON instead of text (`events`: one object per line)'
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from add" -s h -l help -d 'Print help'
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from remove" -l server -d 'border-mgmt\'s API: unix:///path or tcp://ip:port' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from remove" -l config -d 'The config file: its [mgmt].listen (and its instance, for the state region)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from remove" -l instance -d 'The instance: its default socket unix:///run/border/NAME.sock (and its state region)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from remove" -l cert -d 'Client certificate (PEM) for a tcp:// server; pinned on the server' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from remove" -l key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from remove" -l ca -d 'CA of the server\'s certificate (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from remove" -l server-name -d 'Name to verify the server\'s certificate against (default: its IP address)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from remove" -l gateway -d 'Reach the appliance through this border-gw (tcp://ip:port, mutual TLS with --cert/--key/--ca); needs --appliance. See docs/fleet.md' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from remove" -l appliance -d 'The appliance to call through --gateway (its [mgmt.agent].id)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from remove" -l timeout-ms -d 'How long to wait for border-mgmt, to connect and for each answer (`10s`, `500ms`; a bare number is milliseconds)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from remove" -l dry-run -d 'Validate only; apply nothing'
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from remove" -l json -d 'Machine-readable JSON instead of text (`events`: one object per line)'
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from remove" -s h -l help -d 'Print help'
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from disable" -l note -d 'Text kept with the override and shown in the reason' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from disable" -l server -d 'border-mgmt\'s API: unix:///path or tcp://ip:port' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from disable" -l config -d 'The config file: its [mgmt].listen (and its instance, for the state region)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from disable" -l instance -d 'The instance: its default socket unix:///run/border/NAME.sock (and its state region)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from disable" -l cert -d 'Client certificate (PEM) for a tcp:// server; pinned on the server' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from disable" -l key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from disable" -l ca -d 'CA of the server\'s certificate (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from disable" -l server-name -d 'Name to verify the server\'s certificate against (default: its IP address)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from disable" -l gateway -d 'Reach the appliance through this border-gw (tcp://ip:port, mutual TLS with --cert/--key/--ca); needs --appliance. See docs/fleet.md' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from disable" -l appliance -d 'The appliance to call through --gateway (its [mgmt.agent].id)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from disable" -l timeout-ms -d 'How long to wait for border-mgmt, to connect and for each answer (`10s`, `500ms`; a bare number is milliseconds)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from disable" -l kill -d 'Also reset every connection the backend holds'
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from disable" -l json -d 'Machine-readable JSON instead of text (`events`: one object per line)'
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from disable" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from enable" -l note -d 'Text kept with the override and shown in the reason' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from enable" -l server -d 'border-mgmt\'s API: unix:///path or tcp://ip:port' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from enable" -l config -d 'The config file: its [mgmt].listen (and its instance, for the state region)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from enable" -l instance -d 'The instance: its default socket unix:///run/border/NAME.sock (and its state region)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from enable" -l cert -d 'Client certificate (PEM) for a tcp:// server; pinned on the server' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from enable" -l key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from enable" -l ca -d 'CA of the server\'s certificate (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from enable" -l server-name -d 'Name to verify the server\'s certificate against (default: its IP address)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from enable" -l gateway -d 'Reach the appliance through this border-gw (tcp://ip:port, mutual TLS with --cert/--key/--ca); needs --appliance. See docs/fleet.md' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from enable" -l appliance -d 'The appliance to call through --gateway (its [mgmt.agent].id)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from enable" -l timeout-ms -d 'How long to wait for border-mgmt, to connect and for each answer (`10s`, `500ms`; a bare number is milliseconds)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from enable" -l json -d 'Machine-readable JSON instead of text (`events`: one object per line)'
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from enable" -s h -l help -d 'Print help'
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from help" -f -a "add" -d 'Add a backend to a VIP ([[vip.backend]] with these keys)'
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from help" -f -a "remove" -d 'Remove a backend from a VIP; its open connections are no longer forwarded'
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from help" -f -a "disable" -d 'Take a backend out of the ring: as `drain` (open connections finish), or with --kill also reset every connection it holds'
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from help" -f -a "enable" -d 'Undo `backend disable` (with or without --kill) and `drain`: the backend takes new connections again'
complete -c borderctl -n "__fish_borderctl_using_subcommand backend; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and not __fish_seen_subcommand_from add remove help" -l server -d 'border-mgmt\'s API: unix:///path or tcp://ip:port' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and not __fish_seen_subcommand_from add remove help" -l config -d 'The config file: its [mgmt].listen (and its instance, for the state region)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and not __fish_seen_subcommand_from add remove help" -l instance -d 'The instance: its default socket unix:///run/border/NAME.sock (and its state region)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and not __fish_seen_subcommand_from add remove help" -l cert -d 'Client certificate (PEM) for a tcp:// server; pinned on the server' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and not __fish_seen_subcommand_from add remove help" -l key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and not __fish_seen_subcommand_from add remove help" -l ca -d 'CA of the server\'s certificate (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and not __fish_seen_subcommand_from add remove help" -l server-name -d 'Name to verify the server\'s certificate against (default: its IP address)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and not __fish_seen_subcommand_from add remove help" -l gateway -d 'Reach the appliance through this border-gw (tcp://ip:port, mutual TLS with --cert/--key/--ca); needs --appliance. See docs/fleet.md' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and not __fish_seen_subcommand_from add remove help" -l appliance -d 'The appliance to call through --gateway (its [mgmt.agent].id)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and not __fish_seen_subcommand_from add remove help" -l timeout-ms -d 'How long to wait for border-mgmt, to connect and for each answer (`10s`, `500ms`; a bare number is milliseconds)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and not __fish_seen_subcommand_from add remove help" -l json -d 'Machine-readable JSON instead of text (`events`: one object per line)'
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and not __fish_seen_subcommand_from add remove help" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and not __fish_seen_subcommand_from add remove help" -f -a "add" -d 'Add the VIP in FILE: exactly one [[vip]] table, with its [[vip.backend]], [vip.health] and [vip.limits] tables (docs/config.md)'
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and not __fish_seen_subcommand_from add remove help" -f -a "remove" -d 'Remove a VIP: it stops being served and announced'
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and not __fish_seen_subcommand_from add remove help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and __fish_seen_subcommand_from add" -l server -d 'border-mgmt\'s API: unix:///path or tcp://ip:port' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and __fish_seen_subcommand_from add" -l config -d 'The config file: its [mgmt].listen (and its instance, for the state region)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and __fish_seen_subcommand_from add" -l instance -d 'The instance: its default socket unix:///run/border/NAME.sock (and its state region)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and __fish_seen_subcommand_from add" -l cert -d 'Client certificate (PEM) for a tcp:// server; pinned on the server' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and __fish_seen_subcommand_from add" -l key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and __fish_seen_subcommand_from add" -l ca -d 'CA of the server\'s certificate (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and __fish_seen_subcommand_from add" -l server-name -d 'Name to verify the server\'s certificate against (default: its IP address)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and __fish_seen_subcommand_from add" -l gateway -d 'Reach the appliance through this border-gw (tcp://ip:port, mutual TLS with --cert/--key/--ca); needs --appliance. See docs/fleet.md' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and __fish_seen_subcommand_from add" -l appliance -d 'The appliance to call through --gateway (its [mgmt.agent].id)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and __fish_seen_subcommand_from add" -l timeout-ms -d 'How long to wait for border-mgmt, to connect and for each answer (`10s`, `500ms`; a bare number is milliseconds)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and __fish_seen_subcommand_from add" -l dry-run -d 'Validate only; apply nothing'
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and __fish_seen_subcommand_from add" -l json -d 'Machine-readable JSON instead of text (`events`: one object per line)'
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and __fish_seen_subcommand_from add" -s h -l help -d 'Print help'
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and __fish_seen_subcommand_from remove" -l server -d 'border-mgmt\'s API: unix:///path or tcp://ip:port' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and __fish_seen_subcommand_from remove" -l config -d 'The config file: its [mgmt].listen (and its instance, for the state region)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and __fish_seen_subcommand_from remove" -l instance -d 'The instance: its default socket unix:///run/border/NAME.sock (and its state region)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and __fish_seen_subcommand_from remove" -l cert -d 'Client certificate (PEM) for a tcp:// server; pinned on the server' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and __fish_seen_subcommand_from remove" -l key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and __fish_seen_subcommand_from remove" -l ca -d 'CA of the server\'s certificate (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and __fish_seen_subcommand_from remove" -l server-name -d 'Name to verify the server\'s certificate against (default: its IP address)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and __fish_seen_subcommand_from remove" -l gateway -d 'Reach the appliance through this border-gw (tcp://ip:port, mutual TLS with --cert/--key/--ca); needs --appliance. See docs/fleet.md' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and __fish_seen_subcommand_from remove" -l appliance -d 'The appliance to call through --gateway (its [mgmt.agent].id)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and __fish_seen_subcommand_from remove" -l timeout-ms -d 'How long to wait for border-mgmt, to connect and for each answer (`10s`, `500ms`; a bare number is milliseconds)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and __fish_seen_subcommand_from remove" -l dry-run -d 'Validate only; apply nothing'
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and __fish_seen_subcommand_from remove" -l json -d 'Machine-readable JSON instead of text (`events`: one object per line)'
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and __fish_seen_subcommand_from remove" -s h -l help -d 'Print help'
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and __fish_seen_subcommand_from help" -f -a "add" -d 'Add the VIP in FILE: exactly one [[vip]] table, with its [[vip.backend]], [vip.health] and [vip.limits] tables (docs/config.md)'
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and __fish_seen_subcommand_from help" -f -a "remove" -d 'Remove a VIP: it stops being served and announced'
complete -c borderctl -n "__fish_borderctl_using_subcommand vip; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c borderctl -n "__fish_borderctl_using_subcommand stats" -l server -d 'border-mgmt\'s API: unix:///path or tcp://ip:port' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand stats" -l config -d 'The config file: its [mgmt].listen (and its instance, for the state region)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand stats" -l instance -d 'The instance: its default socket unix:///run/border/NAME.sock (and its state region)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand stats" -l cert -d 'Client certificate (PEM) for a tcp:// server; pinned on the server' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand stats" -l key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand stats" -l ca -d 'CA of the server\'s certificate (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand stats" -l server-name -d 'Name to verify the server\'s certificate against (default: its IP address)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand stats" -l gateway -d 'Reach the appliance through this border-gw (tcp://ip:port, mutual TLS with --cert/--key/--ca); needs --appliance. See docs/fleet.md' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand stats" -l appliance -d 'The appliance to call through --gateway (its [mgmt.agent].id)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand stats" -l timeout-ms -d 'How long to wait for border-mgmt, to connect and for each answer (`10s`, `500ms`; a bare number is milliseconds)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand stats" -l all -d 'Show every counter, also those that are zero'
complete -c borderctl -n "__fish_borderctl_using_subcommand stats" -l json -d 'Machine-readable JSON instead of text (`events`: one object per line)'
complete -c borderctl -n "__fish_borderctl_using_subcommand stats" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c borderctl -n "__fish_borderctl_using_subcommand events" -l count -d 'Stop after this many events' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand events" -l server -d 'border-mgmt\'s API: unix:///path or tcp://ip:port' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand events" -l config -d 'The config file: its [mgmt].listen (and its instance, for the state region)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand events" -l instance -d 'The instance: its default socket unix:///run/border/NAME.sock (and its state region)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand events" -l cert -d 'Client certificate (PEM) for a tcp:// server; pinned on the server' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand events" -l key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand events" -l ca -d 'CA of the server\'s certificate (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand events" -l server-name -d 'Name to verify the server\'s certificate against (default: its IP address)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand events" -l gateway -d 'Reach the appliance through this border-gw (tcp://ip:port, mutual TLS with --cert/--key/--ca); needs --appliance. See docs/fleet.md' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand events" -l appliance -d 'The appliance to call through --gateway (its [mgmt.agent].id)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand events" -l timeout-ms -d 'How long to wait for border-mgmt, to connect and for each answer (`10s`, `500ms`; a bare number is milliseconds)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand events" -l json -d 'Machine-readable JSON instead of text (`events`: one object per line)'
complete -c borderctl -n "__fish_borderctl_using_subcommand events" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c borderctl -n "__fish_borderctl_using_subcommand conns" -l vip -d 'Only connections to this VIP: an address, or address:port (192.0.2.10:443, [2001:db8::10]:443)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand conns" -l backend -d 'Only connections to this backend: an address, or address:port' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand conns" -l client -d 'Only clients in this prefix (198.51.100.0/24) or of this address' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand conns" -l limit -d 'Stop after this many connections' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand conns" -l server -d 'border-mgmt\'s API: unix:///path or tcp://ip:port' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand conns" -l config -d 'The config file: its [mgmt].listen (and its instance, for the state region)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand conns" -l instance -d 'The instance: its default socket unix:///run/border/NAME.sock (and its state region)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand conns" -l cert -d 'Client certificate (PEM) for a tcp:// server; pinned on the server' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand conns" -l key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand conns" -l ca -d 'CA of the server\'s certificate (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand conns" -l server-name -d 'Name to verify the server\'s certificate against (default: its IP address)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand conns" -l gateway -d 'Reach the appliance through this border-gw (tcp://ip:port, mutual TLS with --cert/--key/--ca); needs --appliance. See docs/fleet.md' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand conns" -l appliance -d 'The appliance to call through --gateway (its [mgmt.agent].id)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand conns" -l timeout-ms -d 'How long to wait for border-mgmt, to connect and for each answer (`10s`, `500ms`; a bare number is milliseconds)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand conns" -l json -d 'Machine-readable JSON instead of text (`events`: one object per line)'
complete -c borderctl -n "__fish_borderctl_using_subcommand conns" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c borderctl -n "__fish_borderctl_using_subcommand maintenance" -l server -d 'border-mgmt\'s API: unix:///path or tcp://ip:port' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand maintenance" -l config -d 'The config file: its [mgmt].listen (and its instance, for the state region)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand maintenance" -l instance -d 'The instance: its default socket unix:///run/border/NAME.sock (and its state region)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand maintenance" -l cert -d 'Client certificate (PEM) for a tcp:// server; pinned on the server' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand maintenance" -l key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand maintenance" -l ca -d 'CA of the server\'s certificate (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand maintenance" -l server-name -d 'Name to verify the server\'s certificate against (default: its IP address)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand maintenance" -l gateway -d 'Reach the appliance through this border-gw (tcp://ip:port, mutual TLS with --cert/--key/--ca); needs --appliance. See docs/fleet.md' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand maintenance" -l appliance -d 'The appliance to call through --gateway (its [mgmt.agent].id)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand maintenance" -l timeout-ms -d 'How long to wait for border-mgmt, to connect and for each answer (`10s`, `500ms`; a bare number is milliseconds)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand maintenance" -l json -d 'Machine-readable JSON instead of text (`events`: one object per line)'
complete -c borderctl -n "__fish_borderctl_using_subcommand maintenance" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c borderctl -n "__fish_borderctl_using_subcommand log-level" -l daemon -d 'Which daemon: border-mgmt (mgmt) or border-dp (dp)' -r -f -a "mgmt\t'border-mgmt'
dp\t'border-dp'"
complete -c borderctl -n "__fish_borderctl_using_subcommand log-level" -l server -d 'border-mgmt\'s API: unix:///path or tcp://ip:port' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand log-level" -l config -d 'The config file: its [mgmt].listen (and its instance, for the state region)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand log-level" -l instance -d 'The instance: its default socket unix:///run/border/NAME.sock (and its state region)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand log-level" -l cert -d 'Client certificate (PEM) for a tcp:// server; pinned on the server' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand log-level" -l key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand log-level" -l ca -d 'CA of the server\'s certificate (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand log-level" -l server-name -d 'Name to verify the server\'s certificate against (default: its IP address)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand log-level" -l gateway -d 'Reach the appliance through this border-gw (tcp://ip:port, mutual TLS with --cert/--key/--ca); needs --appliance. See docs/fleet.md' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand log-level" -l appliance -d 'The appliance to call through --gateway (its [mgmt.agent].id)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand log-level" -l timeout-ms -d 'How long to wait for border-mgmt, to connect and for each answer (`10s`, `500ms`; a bare number is milliseconds)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand log-level" -l json -d 'Machine-readable JSON instead of text (`events`: one object per line)'
complete -c borderctl -n "__fish_borderctl_using_subcommand log-level" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c borderctl -n "__fish_borderctl_using_subcommand diag" -l window -d 'Time between the two samples, the window of the drop rates (`5s`, `1m`; a bare number is seconds)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand diag" -l server -d 'border-mgmt\'s API: unix:///path or tcp://ip:port' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand diag" -l config -d 'The config file: its [mgmt].listen (and its instance, for the state region)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand diag" -l instance -d 'The instance: its default socket unix:///run/border/NAME.sock (and its state region)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand diag" -l cert -d 'Client certificate (PEM) for a tcp:// server; pinned on the server' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand diag" -l key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand diag" -l ca -d 'CA of the server\'s certificate (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand diag" -l server-name -d 'Name to verify the server\'s certificate against (default: its IP address)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand diag" -l gateway -d 'Reach the appliance through this border-gw (tcp://ip:port, mutual TLS with --cert/--key/--ca); needs --appliance. See docs/fleet.md' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand diag" -l appliance -d 'The appliance to call through --gateway (its [mgmt.agent].id)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand diag" -l timeout-ms -d 'How long to wait for border-mgmt, to connect and for each answer (`10s`, `500ms`; a bare number is milliseconds)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand diag" -l json -d 'Machine-readable JSON instead of text (`events`: one object per line)'
complete -c borderctl -n "__fish_borderctl_using_subcommand diag" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c borderctl -n "__fish_borderctl_using_subcommand counters" -l server -d 'border-mgmt\'s API: unix:///path or tcp://ip:port' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand counters" -l config -d 'The config file: its [mgmt].listen (and its instance, for the state region)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand counters" -l instance -d 'The instance: its default socket unix:///run/border/NAME.sock (and its state region)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand counters" -l cert -d 'Client certificate (PEM) for a tcp:// server; pinned on the server' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand counters" -l key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand counters" -l ca -d 'CA of the server\'s certificate (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand counters" -l server-name -d 'Name to verify the server\'s certificate against (default: its IP address)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand counters" -l gateway -d 'Reach the appliance through this border-gw (tcp://ip:port, mutual TLS with --cert/--key/--ca); needs --appliance. See docs/fleet.md' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand counters" -l appliance -d 'The appliance to call through --gateway (its [mgmt.agent].id)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand counters" -l timeout-ms -d 'How long to wait for border-mgmt, to connect and for each answer (`10s`, `500ms`; a bare number is milliseconds)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand counters" -l all -d 'Show every counter, also those that are zero'
complete -c borderctl -n "__fish_borderctl_using_subcommand counters" -l json -d 'Machine-readable JSON instead of text (`events`: one object per line)'
complete -c borderctl -n "__fish_borderctl_using_subcommand counters" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c borderctl -n "__fish_borderctl_using_subcommand capture" -l port -d 'A `[[port]].name` of the config; repeat for several ports (e.g. the client side and the backend side, to see a frame before and after its rewrite)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand capture" -l direction -d 'Frames the port received, sent, or both' -r -f -a "rx\t'Frames the port received (before border rewrote them)'
tx\t'Frames border sent out of the port (after the rewrite)'
both\t'Both'"
complete -c borderctl -n "__fish_borderctl_using_subcommand capture" -l count -d 'Stop after this many packets' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand capture" -l duration -d 'Stop after this long (`30s`, `5m`; a bare number is seconds)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand capture" -s w -d 'The pcapng file to write (replaced if it exists)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand capture" -l snaplen -d 'Bytes kept of each frame' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand capture" -l server -d 'border-mgmt\'s API: unix:///path or tcp://ip:port' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand capture" -l config -d 'The config file: its [mgmt].listen (and its instance, for the state region)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand capture" -l instance -d 'The instance: its default socket unix:///run/border/NAME.sock (and its state region)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand capture" -l cert -d 'Client certificate (PEM) for a tcp:// server; pinned on the server' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand capture" -l key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand capture" -l ca -d 'CA of the server\'s certificate (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand capture" -l server-name -d 'Name to verify the server\'s certificate against (default: its IP address)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand capture" -l gateway -d 'Reach the appliance through this border-gw (tcp://ip:port, mutual TLS with --cert/--key/--ca); needs --appliance. See docs/fleet.md' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand capture" -l appliance -d 'The appliance to call through --gateway (its [mgmt.agent].id)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand capture" -l timeout-ms -d 'How long to wait for border-mgmt, to connect and for each answer (`10s`, `500ms`; a bare number is milliseconds)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand capture" -l json -d 'Machine-readable JSON instead of text (`events`: one object per line)'
complete -c borderctl -n "__fish_borderctl_using_subcommand capture" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c borderctl -n "__fish_borderctl_using_subcommand completions" -l server -d 'border-mgmt\'s API: unix:///path or tcp://ip:port' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand completions" -l config -d 'The config file: its [mgmt].listen (and its instance, for the state region)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand completions" -l instance -d 'The instance: its default socket unix:///run/border/NAME.sock (and its state region)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand completions" -l cert -d 'Client certificate (PEM) for a tcp:// server; pinned on the server' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand completions" -l key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand completions" -l ca -d 'CA of the server\'s certificate (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand completions" -l server-name -d 'Name to verify the server\'s certificate against (default: its IP address)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand completions" -l gateway -d 'Reach the appliance through this border-gw (tcp://ip:port, mutual TLS with --cert/--key/--ca); needs --appliance. See docs/fleet.md' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand completions" -l appliance -d 'The appliance to call through --gateway (its [mgmt.agent].id)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand completions" -l timeout-ms -d 'How long to wait for border-mgmt, to connect and for each answer (`10s`, `500ms`; a bare number is milliseconds)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand completions" -l json -d 'Machine-readable JSON instead of text (`events`: one object per line)'
complete -c borderctl -n "__fish_borderctl_using_subcommand completions" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c borderctl -n "__fish_borderctl_using_subcommand man-pages" -l server -d 'border-mgmt\'s API: unix:///path or tcp://ip:port' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand man-pages" -l config -d 'The config file: its [mgmt].listen (and its instance, for the state region)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand man-pages" -l instance -d 'The instance: its default socket unix:///run/border/NAME.sock (and its state region)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand man-pages" -l cert -d 'Client certificate (PEM) for a tcp:// server; pinned on the server' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand man-pages" -l key -d 'The client certificate\'s private key (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand man-pages" -l ca -d 'CA of the server\'s certificate (PEM)' -r -F
complete -c borderctl -n "__fish_borderctl_using_subcommand man-pages" -l server-name -d 'Name to verify the server\'s certificate against (default: its IP address)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand man-pages" -l gateway -d 'Reach the appliance through this border-gw (tcp://ip:port, mutual TLS with --cert/--key/--ca); needs --appliance. See docs/fleet.md' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand man-pages" -l appliance -d 'The appliance to call through --gateway (its [mgmt.agent].id)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand man-pages" -l timeout-ms -d 'How long to wait for border-mgmt, to connect and for each answer (`10s`, `500ms`; a bare number is milliseconds)' -r
complete -c borderctl -n "__fish_borderctl_using_subcommand man-pages" -l json -d 'Machine-readable JSON instead of text (`events`: one object per line)'
complete -c borderctl -n "__fish_borderctl_using_subcommand man-pages" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c borderctl -n "__fish_borderctl_using_subcommand help; and not __fish_seen_subcommand_from status apply config health drain undrain weight backend vip stats events conns maintenance log-level diag counters capture completions man-pages help" -f -a "status" -d 'Publisher, dataplane workers and every VIP backend with its state and reason'
complete -c borderctl -n "__fish_borderctl_using_subcommand help; and not __fish_seen_subcommand_from status apply config health drain undrain weight backend vip stats events conns maintenance log-level diag counters capture completions man-pages help" -f -a "apply" -d 'Apply a whole config file (validated, atomic; only [[vip]] and zone change at run time)'
complete -c borderctl -n "__fish_borderctl_using_subcommand help; and not __fish_seen_subcommand_from status apply config health drain undrain weight backend vip stats events conns maintenance log-level diag counters capture completions man-pages help" -f -a "config" -d 'The running config'
complete -c borderctl -n "__fish_borderctl_using_subcommand help; and not __fish_seen_subcommand_from status apply config health drain undrain weight backend vip stats events conns maintenance log-level diag counters capture completions man-pages help" -f -a "health" -d 'Every backend of every VIP: its health verdict, each checker\'s last observation, and the quorum'
complete -c borderctl -n "__fish_borderctl_using_subcommand help; and not __fish_seen_subcommand_from status apply config health drain undrain weight backend vip stats events conns maintenance log-level diag counters capture completions man-pages help" -f -a "drain" -d 'Drain a backend: no new connections; open ones finish'
complete -c borderctl -n "__fish_borderctl_using_subcommand help; and not __fish_seen_subcommand_from status apply config health drain undrain weight backend vip stats events conns maintenance log-level diag counters capture completions man-pages help" -f -a "undrain" -d 'Undo a drain'
complete -c borderctl -n "__fish_borderctl_using_subcommand help; and not __fish_seen_subcommand_from status apply config health drain undrain weight backend vip stats events conns maintenance log-level diag counters capture completions man-pages help" -f -a "weight" -d 'Set a backend\'s weight (0..=65535; 0 takes it out of the ring), or `reset` to the configured weight'
complete -c borderctl -n "__fish_borderctl_using_subcommand help; and not __fish_seen_subcommand_from status apply config health drain undrain weight backend vip stats events conns maintenance log-level diag counters capture completions man-pages help" -f -a "backend" -d 'Add or remove one backend of a VIP in the running config; disable (drain, or --kill its connections) or enable one'
complete -c borderctl -n "__fish_borderctl_using_subcommand help; and not __fish_seen_subcommand_from status apply config health drain undrain weight backend vip stats events conns maintenance log-level diag counters capture completions man-pages help" -f -a "vip" -d 'Add or remove one VIP of the running config'
complete -c borderctl -n "__fish_borderctl_using_subcommand help; and not __fish_seen_subcommand_from status apply config health drain undrain weight backend vip stats events conns maintenance log-level diag counters capture completions man-pages help" -f -a "stats" -d 'Dataplane counters per worker and totals, and per-VIP / per-backend flow statistics'
complete -c borderctl -n "__fish_borderctl_using_subcommand help; and not __fish_seen_subcommand_from status apply config health drain undrain weight backend vip stats events conns maintenance log-level diag counters capture completions man-pages help" -f -a "events" -d 'Follow border-mgmt\'s events (publishes, refused tables, worker liveness, config and backend changes, health) from now on, one line each'
complete -c borderctl -n "__fish_borderctl_using_subcommand help; and not __fish_seen_subcommand_from status apply config health drain undrain weight backend vip stats events conns maintenance log-level diag counters capture completions man-pages help" -f -a "conns" -d 'The live connections border-dp\'s workers hold: client, VIP, backend, local tuple, state, age, packets and bytes each way, PROXY v2 status'
complete -c borderctl -n "__fish_borderctl_using_subcommand help; and not __fish_seen_subcommand_from status apply config health drain undrain weight backend vip stats events conns maintenance log-level diag counters capture completions man-pages help" -f -a "maintenance" -d 'BGP maintenance: `on` withdraws every VIP route from the routers (within 1 s) while border-dp keeps forwarding the connections already established; `off` announces them again'
complete -c borderctl -n "__fish_borderctl_using_subcommand help; and not __fish_seen_subcommand_from status apply config health drain undrain weight backend vip stats events conns maintenance log-level diag counters capture completions man-pages help" -f -a "log-level" -d 'Set the log level of border-mgmt or border-dp while it runs'
complete -c borderctl -n "__fish_borderctl_using_subcommand help; and not __fish_seen_subcommand_from status apply config health drain undrain weight backend vip stats events conns maintenance log-level diag counters capture completions man-pages help" -f -a "diag" -d 'Name the typical problems, each with its evidence and the next command'
complete -c borderctl -n "__fish_borderctl_using_subcommand help; and not __fish_seen_subcommand_from status apply config health drain undrain weight backend vip stats events conns maintenance log-level diag counters capture completions man-pages help" -f -a "counters" -d 'Per-worker dataplane counters and their totals, and each port\'s NIC statistics, read from border-dp\'s state region on this machine (without border-mgmt)'
complete -c borderctl -n "__fish_borderctl_using_subcommand help; and not __fish_seen_subcommand_from status apply config health drain undrain weight backend vip stats events conns maintenance log-level diag counters capture completions man-pages help" -f -a "capture" -d 'Capture packets of border-dp\'s ports into a pcapng file (tcpdump -r, Wireshark), with a tcpdump filter expression'
complete -c borderctl -n "__fish_borderctl_using_subcommand help; and not __fish_seen_subcommand_from status apply config health drain undrain weight backend vip stats events conns maintenance log-level diag counters capture completions man-pages help" -f -a "completions" -d 'Print the shell completion script for bash, zsh or fish'
complete -c borderctl -n "__fish_borderctl_using_subcommand help; and not __fish_seen_subcommand_from status apply config health drain undrain weight backend vip stats events conns maintenance log-level diag counters capture completions man-pages help" -f -a "man-pages" -d 'Write the man pages of borderctl (and each of its commands), border-dp, border-mgmt and border-gw into DIR'
complete -c borderctl -n "__fish_borderctl_using_subcommand help; and not __fish_seen_subcommand_from status apply config health drain undrain weight backend vip stats events conns maintenance log-level diag counters capture completions man-pages help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c borderctl -n "__fish_borderctl_using_subcommand help; and __fish_seen_subcommand_from config" -f -a "show" -d 'Print the config border-mgmt runs, as TOML, with its source (the file, or `<api>` for a config applied with `borderctl apply`) and when it was applied, as comment lines above it'
complete -c borderctl -n "__fish_borderctl_using_subcommand help; and __fish_seen_subcommand_from backend" -f -a "add" -d 'Add a backend to a VIP ([[vip.backend]] with these keys)'
complete -c borderctl -n "__fish_borderctl_using_subcommand help; and __fish_seen_subcommand_from backend" -f -a "remove" -d 'Remove a backend from a VIP; its open connections are no longer forwarded'
complete -c borderctl -n "__fish_borderctl_using_subcommand help; and __fish_seen_subcommand_from backend" -f -a "disable" -d 'Take a backend out of the ring: as `drain` (open connections finish), or with --kill also reset every connection it holds'
complete -c borderctl -n "__fish_borderctl_using_subcommand help; and __fish_seen_subcommand_from backend" -f -a "enable" -d 'Undo `backend disable` (with or without --kill) and `drain`: the backend takes new connections again'
complete -c borderctl -n "__fish_borderctl_using_subcommand help; and __fish_seen_subcommand_from vip" -f -a "add" -d 'Add the VIP in FILE: exactly one [[vip]] table, with its [[vip.backend]], [vip.health] and [vip.limits] tables (docs/config.md)'
complete -c borderctl -n "__fish_borderctl_using_subcommand help; and __fish_seen_subcommand_from vip" -f -a "remove" -d 'Remove a VIP: it stops being served and announced'
