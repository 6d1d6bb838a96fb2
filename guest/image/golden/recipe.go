package golden

import (
	"strings"

	"github.com/invisible-dots/invisible-dots/guest/protocol"
)

// Suite is the Debian release the image is made of (DESIGN.md 5: Debian 12).
const Suite = "bookworm"

// Variant is mmdebstrap's base: the Essential packages and apt. Every other
// package is named in Packages, and Recommends are not installed (mmdebstrap's
// default), so the image holds what the recipe says and what that needs.
const Variant = "minbase"

// Packages are the Debian packages the image installs on top of Variant,
// each for a reason (ref 3.3, 4.1).
var Packages = []string{
	// The init and the devices: systemd runs the units of ref 4.1, udev
	// names the disks by label (the seed, the runtime ISO, the root).
	"systemd", "systemd-sysv", "udev", "dbus", "libpam-systemd",
	// The kernel the host boots directly, with its initramfs.
	"linux-image-cloud-amd64", "initramfs-tools",
	// The initramfs compressed with zstd (initramfs-tools' default, gzip
	// without it): quicker to unpack at every boot.
	"zstd",
	// dotagentd's one rule (ref 4.1) and the network.
	"sudo", "iproute2", "ca-certificates", "procps",
	// The desktop: Xvfb and a minimal XFCE session, xdpyinfo to see the
	// server up, import for dot-agentd's screenshot (ref 5.2).
	"xvfb", "xfce4-session", "xfwm4", "xfce4-panel", "xfdesktop4", "xfce4-settings", "xfconf", "dbus-x11",
	"x11-utils", "imagemagick",
	// The browser and the runtime of its MCP server (@playwright/mcp,
	// installed from npm at build time; see npm/).
	"chromium", "nodejs",
	// Fonts for pages and the desktop.
	"fonts-dejavu-core", "fonts-liberation2", "fonts-noto-color-emoji",
	// Where a browser's exit is (ref 6, guest/engine/browser/exitplace):
	// the country of an address (geoiplookup, the country edition of the
	// GeoIP database, Debian's last refresh of which is from 2019) and the
	// time zones of a country (tzdata's zone.tab).
	"geoip-bin", "geoip-database", "tzdata",
}

// RootLabel is the ext4 label of the image's root file system; the kernel
// command line names the root by it.
const RootLabel = "dotroot"

// KernelAppend is the kernel command line of a golden image's direct boot:
// the root by label (the Dot's overlay is the first virtio disk, but a label
// does not depend on the order of QEMU's -drive arguments), the console on
// the serial port QEMU writes to serial.log.
const KernelAppend = "root=LABEL=" + RootLabel + " rw console=ttyS0 quiet"

// ImageBytes is the file system's size. The Dot's overlay is larger (at least
// protocol.Bounds.DiskGiB) and the guest grows the file system to it at boot
// (x-systemd.growfs in fstab), so this only needs room for the image itself
// and its first writes; a small size keeps the inode tables small.
const ImageBytes = 8 << 30

// Display and Screen are the desktop's X display and screen.
const (
	Display = protocol.DefaultDisplay
	Screen  = "1280x800x24"
)

// SetuidAllowed are the only files of the image that may carry the setuid
// bit: sudo (dotagentd's power-off) and D-Bus's launch helper (mode 4754,
// group messagebus: only the bus runs it). provision.sh takes the bit from
// every other one, so dot has no program that runs as root.
var SetuidAllowed = []string{"/usr/bin/sudo", "/usr/lib/dbus-1.0/dbus-daemon-launch-helper"}

// MCPCommand is the browser's MCP server in the image.
const MCPCommand = "/usr/local/bin/playwright-mcp"

// subst fills the placeholders of rootfs/ from the one place each name is
// defined.
var subst = strings.NewReplacer(
	"@ROOT_LABEL@", RootLabel,
	"@SEED_LABEL@", protocol.SeedVolumeLabel,
	"@SEED_CONFIG@", protocol.SeedGuestConfigFile,
	"@SEED_ENGINE_ENV@", protocol.SeedEngineEnvFile,
	"@SEED_SUDOERS@", protocol.SeedSudoersFile,
	"@SEED_META@", protocol.SeedMetaDataFile,
	"@GUEST_CONFIG@", protocol.GuestConfigPath,
	"@ENGINE_ENV@", protocol.EngineEnvPath,
	"@RUNTIME_LABEL@", protocol.RuntimeVolumeLabel,
	"@RUNTIME_MOUNT@", protocol.RuntimeMountPoint,
	"@RUNTIME_UNITS@", protocol.RuntimeUnitsDir,
	"@AGENTD_DIR@", protocol.AgentdSocketDir,
	"@AGENT_DIR@", protocol.AgentSocketDir,
	"@DISPLAY@", Display,
	"@SCREEN@", Screen,
)
