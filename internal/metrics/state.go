package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// sourceTimeout bounds what one scrape waits for a source (the caches ask
// the engine): a slow engine costs a family, not the scrape.
const sourceTimeout = 5 * time.Second

// cacheTTL is how long a listing of the dependency caches is reused: a
// scrape every few seconds must not list the engine's volumes each time.
const cacheTTL = 30 * time.Second

var (
	descLiveJobs = prometheus.NewDesc(Namespace+"_jobs_live", "Queued and running jobs (sessions are kind session), by kind and status.", []string{"kind", "status"}, nil)
	descWS       = prometheus.NewDesc(Namespace+"_workspaces", "Workspaces, by state.", []string{"state"}, nil)
	descPool     = prometheus.NewDesc(Namespace+"_pool_warm_sandboxes", "Warm sandboxes ready for a job, by language.", []string{"language"}, nil)
	descCacheN   = prometheus.NewDesc(Namespace+"_dependency_caches", "Dependency cache volumes, by language.", []string{"language"}, nil)
	descCacheB   = prometheus.NewDesc(Namespace+"_dependency_cache_bytes", "Measured size of the dependency caches, by language (caches of unknown size count 0).", []string{"language"}, nil)
)

// stateCollector reads the Sources at scrape time.
type stateCollector struct {
	src Sources
	m   *Metrics

	mu       sync.Mutex
	caches   []Cache
	cachesAt time.Time
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLiveJobs, descWS, descPool, descCacheN, descCacheB} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), sourceTimeout)
	defer cancel()
	if c.src.LiveJobs != nil {
		for k, n := range c.src.LiveJobs() {
			ch <- prometheus.MustNewConstMetric(descLiveJobs, prometheus.GaugeValue, float64(n), c.m.bound("job/kind", k[0]), c.m.bound("job/status", k[1]))
		}
	}
	if c.src.Workspaces != nil {
		if byState, err := c.src.Workspaces(ctx); err == nil {
			for s, n := range byState {
				ch <- prometheus.MustNewConstMetric(descWS, prometheus.GaugeValue, float64(n), c.m.bound("ws/state", s))
			}
		} else {
			ch <- prometheus.NewInvalidMetric(descWS, err)
		}
	}
	if c.src.PoolReady != nil {
		byLang := map[string]int{}
		for image, n := range c.src.PoolReady() {
			byLang[c.m.bound("pool/language", c.m.languageOf(image))] += n
		}
		for l, n := range byLang {
			ch <- prometheus.MustNewConstMetric(descPool, prometheus.GaugeValue, float64(n), l)
		}
	}
	if c.src.Caches != nil {
		caches, err := c.listCaches(ctx)
		if err != nil {
			ch <- prometheus.NewInvalidMetric(descCacheN, err)
			return
		}
		count, bytes := map[string]float64{}, map[string]float64{}
		for _, k := range caches {
			l := c.m.bound("job/language", k.Language)
			count[l]++
			if k.SizeBytes > 0 {
				bytes[l] += float64(k.SizeBytes)
			}
		}
		for l, n := range count {
			ch <- prometheus.MustNewConstMetric(descCacheN, prometheus.GaugeValue, n, l)
			ch <- prometheus.MustNewConstMetric(descCacheB, prometheus.GaugeValue, bytes[l], l)
		}
	}
}

func (c *stateCollector) listCaches(ctx context.Context) ([]Cache, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.cachesAt.IsZero() && time.Since(c.cachesAt) < cacheTTL {
		return c.caches, nil
	}
	caches, err := c.src.Caches(ctx)
	if err != nil {
		return nil, err
	}
	c.caches, c.cachesAt = caches, time.Now()
	return caches, nil
}
