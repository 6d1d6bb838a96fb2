package v1alpha1

// RequestPending says whether the annotation key holds a request (a start,
// reboot or sleep) that status has not handled yet: handled is the value
// the host agent last acted on.
func (c *Computer) RequestPending(key, handled string) bool {
	v := c.Annotations[key]
	return v != "" && v != handled
}

// Default shape of a Computer whose spec has none (the CRD defaults it; a
// typed client may not).
const (
	DefaultCPUs        = 2
	DefaultMemoryBytes = int64(4) << 30
)

// Shape is the processors and memory the Computer's VM gets: the spec's,
// else the defaults.
func (c *Computer) Shape() (cpus int32, memoryBytes int64) {
	cpus, memoryBytes = c.Spec.CPU, c.Spec.Memory.Value()
	if cpus == 0 {
		cpus = DefaultCPUs
	}
	if memoryBytes == 0 {
		memoryBytes = DefaultMemoryBytes
	}
	return cpus, memoryBytes
}
