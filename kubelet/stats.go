package kubelet

import (
	"context"
	"errors"
	"io"
	"time"

	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// GetStatsSummary is the kubelet's /stats/summary: the node alone (its
// sandboxes' usage is sandboxd's: sandboxctl status, the daemon's
// metrics).
func (p *Provider) GetStatsSummary(ctx context.Context) (*statsv1alpha1.Summary, error) {
	return &statsv1alpha1.Summary{Node: statsv1alpha1.NodeStats{NodeName: p.cfg.NodeName, StartTime: metav1.NewTime(started)}}, nil
}

// started is when the kubelet started.
var started = time.Now()

// GetMetricsResource is the kubelet's /metrics/resource: none here.
func (p *Provider) GetMetricsResource(ctx context.Context) ([]*dto.MetricFamily, error) {
	return nil, nil
}

// PortForward is kubectl port-forward, which a sandboxd node does not
// serve: the pod's ports are exposed on the host (its annotation
// sandboxd.io/ports says where).
func (p *Provider) PortForward(ctx context.Context, namespace, pod string, port int32, stream io.ReadWriteCloser) error {
	stream.Close()
	return errors.New("port-forward is not served by a sandboxd node: the pod's ports are exposed on the host, at the addresses of its annotation " + AnnotationPorts)
}
