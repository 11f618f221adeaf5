package bench

import (
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	eventgatev1 "github.com/eventgate/eventgate/gen/eventgate/v1"
)

// Workload generates realistic events of about 600 bytes: Tenants tenants,
// 20 kinds, 50 reasons, 20 controllers with 10 instances each, labels and
// annotations. RepeatShare of the events repeat one of HotKeys isomorphic
// series keys (same tenant, object, reason, controller, instance and type,
// another note), which the gateway folds into series; the others regard an
// object never seen before (a new pod, a new job run), so each is stored.
type Workload struct {
	Tenants     int
	HotKeys     int
	RepeatShare float64
	// Prefix makes the objects of this workload distinct from those of any
	// other (the series state of one run must not fold the next one).
	Prefix string
	next   atomic.Uint64
}

// NewWorkload returns the default mix: 1,000 tenants, 1,000 hot series
// keys, 20% repeats.
func NewWorkload(prefix string) *Workload {
	return &Workload{Tenants: 1000, HotKeys: 1000, RepeatShare: 0.2, Prefix: prefix}
}

var (
	reasons     = makeNames("Reason", 50)
	controllers = makeNames("example.com/operator-", 20)
	instances   = makeNames("operator-", 10)
	teams       = makeNames("team-", 30)
	namespaces  = makeNames("ns-", 10)
	tenantNames = makeNames("tenant-", 1000)
	wlKinds     = storeKinds
)

func makeNames(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

// TenantName is the name of tenant i.
func TenantName(i int) string {
	if i < len(tenantNames) {
		return tenantNames[i]
	}
	return "tenant-" + strconv.Itoa(i)
}

const noteTail = ": exit code 137 (OOMKilled); memory limit 512Mi exceeded while processing the settlement batch, retrying in 40s"

// Event returns the next event, stamped with at. tenant is its tenant
// index (a watcher per tenant sees it).
func (w *Workload) Event(rng *rand.Rand, at time.Time) (ev *eventgatev1.Event, tenant int) {
	i := w.next.Add(1)
	var obj uint64
	var name string
	repeat := rng.Float64() < w.RepeatShare
	if repeat {
		obj = uint64(rng.IntN(w.HotKeys))
		name = w.Prefix + "-hot-" + strconv.FormatUint(obj, 10)
	} else {
		obj = i
		name = w.Prefix + "-" + strconv.FormatUint(i, 10) + "-7d4f8b9c5"
	}
	tenant = int(obj % uint64(w.Tenants))
	kind := wlKinds[obj%uint64(len(wlKinds))]
	ns := namespaces[obj%uint64(len(namespaces))]
	reason := reasons[obj%uint64(len(reasons))]
	ctl := controllers[obj%uint64(len(controllers))]
	inst := instances[obj%uint64(len(instances))]
	typ := "Normal"
	if obj%7 == 0 {
		typ = "Warning"
	}
	ev = &eventgatev1.Event{
		EventTime:           timestamppb.New(at),
		ReportingController: ctl,
		ReportingInstance:   inst,
		Action:              "Reconcile",
		Reason:              reason,
		Type:                typ,
		Regarding: &eventgatev1.ObjectReference{ApiVersion: "apps/v1", Kind: kind, Namespace: ns, Name: name,
			Uid: "0c1d2e3f-4a5b-4c6d-8e7f-" + strconv.FormatUint(1e11+obj, 10)},
		Related: &eventgatev1.ObjectReference{ApiVersion: "v1", Kind: "Pod", Namespace: ns, Name: name + "-pod"},
		Note:    "Back-off restarting failed container payment in pod " + name + " attempt " + strconv.FormatUint(i, 10) + noteTail,
		Tenant:  &eventgatev1.Tenant{Type: "project", Name: TenantName(tenant)},
		Labels:  map[string]string{"app": "payment", "tier": "backend", "team": teams[obj%uint64(len(teams))]},
		Annotations: map[string]string{
			"example.com/trace-id": strconv.FormatUint(uint64(rng.Int64()), 16) + strconv.FormatUint(uint64(rng.Int64()), 16),
		},
	}
	return ev, tenant
}

// Batch returns n events stamped now.
func (w *Workload) Batch(rng *rand.Rand, n int) []*eventgatev1.Event {
	now := time.Now()
	out := make([]*eventgatev1.Event, n)
	for k := range out {
		out[k], _ = w.Event(rng, now)
	}
	return out
}
