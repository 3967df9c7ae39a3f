#compdef smppproxy
# From github.com/urfave/cli/v2 autocomplete/zsh_autocomplete (MIT License,
# Copyright (c) 2022 urfave/cli maintainers), with $PROG set to smppproxy.
# Install: smppproxy completion zsh > "${fpath[1]}/_smppproxy"

_cli_zsh_autocomplete() {
  local -a opts
  local cur
  cur=${words[-1]}
  if [[ "$cur" == "-"* ]]; then
    opts=("${(@f)$(${words[@]:0:#words[@]-1} ${cur} --generate-bash-completion)}")
  else
    opts=("${(@f)$(${words[@]:0:#words[@]-1} --generate-bash-completion)}")
  fi

  if [[ "${opts[1]}" != "" ]]; then
    _describe 'values' opts
  else
    _files
  fi
}

compdef _cli_zsh_autocomplete smppproxy
