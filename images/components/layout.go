package components

// Where a node image keeps the container images it carries, and the stamp
// its first-boot unit (systemd/harmony-images-import.service) leaves once
// containerd has imported them all. The image build puts the images there
// and the agent waits for the stamp; the unit file, being plain systemd,
// repeats both paths, and a test holds it to these.
const (
	ContainerImagesDir      = "/usr/share/harmony/images"
	ContainerImagesImported = "/var/lib/harmony-images/imported"
)
