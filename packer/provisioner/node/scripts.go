package node

import (
	"strings"
	"text/template"
)

// The scripts run as root on the machine being provisioned (through
// execute_command) and use only what a Debian base system has: sh,
// coreutils, dpkg, apt and systemctl, which edits unit links offline in a
// chroot just as on a running machine.

var funcs = template.FuncMap{"join": strings.Join}

var installScript = template.Must(template.New("install.sh").Funcs(funcs).Parse(`# harmony-node: install the {{.Role}} image's components.
set -eu
S={{.Staging}}
export DEBIAN_FRONTEND=noninteractive LC_ALL=C
{{if .Packages}}
# Debian packages at the pinned versions; apt runs only if one differs.
need=""
for p in {{join .Packages " "}}; do
  have=$(dpkg-query -W -f='${Version}' "${p%%=*}" 2>/dev/null || true)
  [ "$have" = "${p#*=}" ] || need="$need $p"
done
if [ -n "$need" ]; then
  echo "harmony-node: apt-get install$need"
  apt-get update -q
  apt-get install -y -q --no-install-recommends --allow-downgrades $need
fi
apt-mark hold {{join .PackageNames " "}} >/dev/null
{{end}}
{{template "prune" .}}
{{- range .Files}}
install -D -m {{.Mode}} "$S/{{.Staged}}" "{{.Dest}}"
{{- end}}
{{- range .Links}}
mkdir -p "$(dirname "{{.Path}}")"
ln -sfn "{{.Target}}" "{{.Path}}"
{{- end}}
{{if .Mask}}
# Debian's own units for daemons the agent runs as harmony-* units must
# never start by themselves (etcd.service would claim port 2379); the
# others have nothing to do on these machines and cost boot time.
systemctl mask {{join .Mask " "}}
{{end}}
systemctl enable {{join .Enable " "}}
`))

// pruneScript removes what the packages install and a node never runs;
// install.sh runs it after the packages.
var pruneScript = template.Must(installScript.New("prune").Parse(`
{{- if .CNIPlugins}}
# Of the CNI plugins the package installs, only those a node runs
# (images/components.CNIPlugins).
for p in {{join .CNIPlugins " "}}; do
  [ -x "{{.CNIBinDir}}/$p" ] || { echo "harmony-node: {{.CNIBinDir}}/$p is missing" >&2; exit 1; }
done
find "{{.CNIBinDir}}" -maxdepth 1 -type f{{range .CNIPlugins}} ! -name {{.}}{{end}} -delete
{{- end}}
{{- range .Remove}}
rm -rf "{{.}}"
{{- end}}
`))

var queryScript = template.Must(template.New("query-packages.sh").Funcs(funcs).Parse(`# harmony-node: the installed versions of the pinned packages.
set -eu
dpkg-query -W -f='${Package} ${Version}\n' {{join .PackageNames " "}}
`))

var manifestScript = template.Must(template.New("install-manifest.sh").Parse(`# harmony-node: record what the image carries.
set -eu
# /etc/harmony is the agent's configuration directory, 0700 (its unit's
# ConfigurationDirectoryMode).
install -d -m 0700 /etc/harmony
install -m 0644 "{{.Staging}}/image.json" /etc/harmony/image.json
`))

// sysprepScript leaves nothing that must differ between clones, and no
// credential the build used. The staging directory goes last, with the
// provisioner's own cleanup.
var sysprepScript = template.Must(template.New("sysprep.sh").Parse(`# harmony-node: sysprep.
set -eu
export LC_ALL=C
# systemd makes a new machine-id at first boot when the file is empty.
: > /etc/machine-id
rm -f /var/lib/dbus/machine-id
# The build machine's resolver (debootstrap copies it in) is nothing a
# clone can use: the agent writes the network's from guestinfo.
: > /etc/resolv.conf
rm -f /var/lib/systemd/random-seed /var/lib/systemd/credential.secret
# Each clone makes its own host keys (ssh.service regenerates them when
# openssh-server is present).
rm -f /etc/ssh/ssh_host_*
# No credential from the build, no identity from a test enrollment.
rm -f /root/.ssh/authorized_keys /root/.bash_history /root/.lesshst /root/.wget-hsts
rm -rf /var/lib/harmony/* /var/lib/harmony-controller/* /var/lib/etcd/* /etc/kubernetes/pki
rm -f /etc/harmony/bootstrap.json
echo localhost > /etc/hostname
# Caches and logs.
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/debconf/*-old /var/lib/dpkg/*-old
# ldconfig's aux-cache records the libraries' inode numbers and change
# times, which differ in every build: without it two builds of one checkout
# are byte-identical, and ldconfig rebuilds it when it next runs.
rm -f /var/cache/ldconfig/aux-cache
rm -rf /var/log/journal/* /var/log/installer
find /var/log -type f \( -name '*.gz' -o -name '*.[0-9]' -o -name '*.old' \) -delete
find /var/log -type f -exec truncate -s 0 {} +
find /tmp /var/tmp -mindepth 1 -maxdepth 1 ! -path "{{.Staging}}" -exec rm -rf {} +
`))
