#!/bin/sh
# Runs inside the new root (mmdebstrap's customize hook, as root) after the
# packages and the files of rootfs/ are in place: the users of ref 4.1, their
# directories, the hardening of ref 4.1 and 4.3 that files alone cannot give,
# and the units that start at boot. Everything it does is checked by the
# recipe test against the built image.
set -eu

# Users (ref 4.1), none shared. dot runs the desktop, the browser and every
# command of the model; it reads its computer's journal. It has no sudo rule
# and no password (locked), and it is in no group that has one.
useradd --create-home --home-dir /home/dot --shell /bin/bash --user-group \
	--groups audio,video,systemd-journal --comment "Dot" dot
# dotagentd runs dot-agentd: no home, no login, no group but its own.
useradd --system --user-group --no-create-home --home-dir /nonexistent \
	--shell /usr/sbin/nologin --comment "dot-agentd" dotagentd
# dotengine runs the engine; in group dot to read and seed the workspace.
useradd --system --user-group --create-home --home-dir /home/dotengine \
	--shell /usr/sbin/nologin --groups dot --comment "the Dot's engine" dotengine
passwd --lock root >/dev/null
passwd --lock dot >/dev/null

# Directories of ref 4.2.
install -d -o dot -g dot -m 0750 /home/dot
install -d -o dot -g dot -m 2775 /home/dot/workspace
install -d -o dot -g dot -m 0755 /home/dot/downloads /home/dot/documents /home/dot/browsers
install -d -o dotengine -g dotengine -m 0700 /home/dotengine /home/dotengine/state
install -d -o root -g root -m 0755 /etc/invisible-dots /opt/invisible-dots /var/lib/invisible-dots
install -d -o dot -g dot -m 0700 /var/lib/invisible-dots/mcp

# dot cannot become root (ref 4.1, 4.3): the only setuid program left that
# runs as root is sudo (dotagentd's power-off rule needs it), and sudo has no
# rule for dot and dot no password. The others lose the bit through dpkg, so
# an upgrade of their package keeps it off.
for f in /usr/bin/su /usr/bin/mount /usr/bin/umount /usr/bin/chsh /usr/bin/chfn \
	/usr/bin/gpasswd /usr/bin/newgrp /usr/bin/passwd; do
	if [ -e "$f" ]; then
		dpkg-statoverride --update --add root root 0755 "$f"
	fi
done

# The image gives nobody a sudo rule: the Dot's seed writes dotagentd's.
rm -f /etc/sudoers.d/invisible-dots-poweroff

# Boot: networkd with the static address, the seed, the runtime ISO's units,
# the desktop. Nothing waits on a console login (every password is locked),
# and the package timers are off: the image is never upgraded in place.
systemctl enable systemd-networkd.service dots-seed.service dots-runtime.service dot-desktop.service
systemctl mask serial-getty@ttyS0.service getty@tty1.service \
	apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer e2scrub_reap.service \
	systemd-networkd-wait-online.service

# The browser's MCP server runs on Debian's Node (the build checks it starts).
/usr/bin/node /opt/playwright-mcp/node_modules/@playwright/mcp/cli.js --version >/dev/null

# An empty machine-id: systemd makes one at first boot, so no two Dots share
# one (mmdebstrap does the same at its cleanup).
: > /etc/machine-id
