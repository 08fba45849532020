package natsingest

// Meter is told what the ingestor did, for the operators' metrics
// (docs/operations.md). Ingestor.Meter may be nil.
type Meter interface {
	// Stored counts records written and acked.
	Stored(n int)
	// Duplicates counts messages whose Nats-Msg-Id was already stored (a
	// redelivery, or a publish repeated after the dedupe window); they are
	// acked without a second record.
	Duplicates(n int)
	// DeadLettered counts poison messages kept as dead letters and
	// terminated.
	DeadLettered(n int)
}

type noMeter struct{}

func (noMeter) Stored(int)       {}
func (noMeter) Duplicates(int)   {}
func (noMeter) DeadLettered(int) {}

func (in *Ingestor) meter() Meter {
	if in.Meter == nil {
		return noMeter{}
	}
	return in.Meter
}
