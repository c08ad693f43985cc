package k6compat

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/dop251/goja"
)

// vu is one virtual user: a goja runtime of its own (a runtime is not safe
// for two goroutines), with the script's init code run in it once.
type vu struct {
	id       int
	rt       *goja.Runtime
	run      *runner
	ctx      context.Context // of the running iteration, setup or teardown
	exports  *goja.Object
	tags     map[string]string // options.tags, the scenario's name and tags
	group    string            // "" at the root, else "::outer::inner"
	iter     int
	inInit   bool
	expect   *expected // the VU's response callback; nil: http_req_failed off
	parse    goja.Callable
	modules  map[string]goja.Value
	scenario string
}

// guarded are property names a proxy must let read as undefined: engine
// and bundler probes, not script API.
var guarded = map[string]bool{"__esModule": true, "default": true, "toJSON": true, "then": true, "constructor": true}

// newVU runs the script's init code in a fresh runtime. env is __ENV.
func newVU(r *runner, id int, scenarioName string, env, tags map[string]string) (*vu, error) {
	v := &vu{id: id, rt: goja.New(), run: r, ctx: r.ctx, inInit: true, scenario: scenarioName,
		tags: tags, expect: defaultExpected(), modules: map[string]goja.Value{}}
	rt := v.rt
	rt.SetMaxCallStackSize(2000)
	parse, _ := goja.AssertFunction(rt.Get("JSON").ToObject(rt).Get("parse"))
	v.parse = parse

	envObj := rt.NewObject()
	for k, val := range env {
		_ = envObj.Set(k, val)
	}
	module := rt.NewObject()
	exports := rt.NewObject()
	_ = module.Set("exports", exports)
	for name, val := range map[string]any{
		"__ENV": envObj, "__VU": id, "__ITER": 0, "module": module, "exports": exports,
		"require": v.require, "console": v.console(),
		"open": func(goja.FunctionCall) goja.Value {
			panic(v.unsupported("open() is not supported by the k6 compatibility runner: create data in setup()"))
		},
	} {
		if err := rt.Set(name, val); err != nil {
			return nil, err
		}
	}
	stop := context.AfterFunc(r.ctx, func() { rt.Interrupt("run ended") })
	defer stop()
	if _, err := rt.RunProgram(r.program); err != nil {
		return nil, fmt.Errorf("init code of VU %d: %s", id, describe(err))
	}
	v.inInit = false
	v.exports = module.Get("exports").ToObject(rt)
	return v, nil
}

// require answers the imports esbuild left: k6's modules.
func (v *vu) require(name string) goja.Value {
	if m, ok := v.modules[name]; ok {
		return m
	}
	var obj *goja.Object
	switch name {
	case "k6":
		obj = v.k6Module()
	case "k6/http":
		obj = v.httpModule()
	case "k6/metrics":
		obj = v.metricsModule()
	default:
		panic(v.unsupported("module %q is not supported by the k6 compatibility runner (it implements k6, k6/http and k6/metrics)", name))
	}
	m := v.guard(name, obj)
	v.modules[name] = m
	return m
}

// guard makes reading a member that obj does not have an error naming it,
// so a script using more of k6 than this runner implements fails loudly
// instead of calling undefined. The guard is obj's prototype, not a proxy
// around obj: esbuild's import helper copies a module's own members onto
// an object with the module's prototype, so a named import of a missing
// member reaches the guard too.
func (v *vu) guard(what string, obj *goja.Object) goja.Value {
	proto := v.rt.ToValue(v.rt.NewProxy(v.rt.NewObject(), &goja.ProxyTrapConfig{
		Get: func(target *goja.Object, prop string, _ goja.Value) goja.Value {
			val := target.Get(prop)
			if val == nil && !guarded[prop] {
				panic(v.unsupported("%s.%s is not supported by the k6 compatibility runner", what, prop))
			}
			return val
		},
	})).ToObject(v.rt)
	if err := obj.SetPrototype(proto); err != nil {
		panic(v.rt.NewGoError(err))
	}
	return obj
}

func (v *vu) k6Module() *goja.Object {
	rt := v.rt
	o := rt.NewObject()
	_ = o.Set("check", v.check)
	_ = o.Set("group", v.groupFn)
	_ = o.Set("sleep", func(call goja.FunctionCall) goja.Value {
		d := time.Duration(call.Argument(0).ToFloat() * float64(time.Second))
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-v.ctx.Done(): // the runtime's interrupt ends the iteration next
		}
		return goja.Undefined()
	})
	_ = o.Set("fail", func(call goja.FunctionCall) goja.Value {
		msg := "fail()"
		if a := call.Argument(0); !goja.IsUndefined(a) {
			msg = a.String()
		}
		panic(rt.NewGoError(errors.New(msg)))
	})
	return o
}

// check runs every named check on val; each adds a sample to the checks
// Rate. It never throws on a failed check, as in k6.
func (v *vu) check(call goja.FunctionCall) goja.Value {
	rt := v.rt
	val := call.Argument(0)
	setsV := call.Argument(1)
	if goja.IsUndefined(setsV) || goja.IsNull(setsV) {
		panic(rt.NewTypeError("check() needs an object of checks"))
	}
	sets := setsV.ToObject(rt)
	extra, err := stringMap(call.Argument(2).Export(), "check tags")
	if err != nil {
		panic(rt.NewTypeError(err.Error()))
	}
	all := true
	for _, name := range sets.Keys() {
		c := sets.Get(name)
		var ok bool
		if fn, isFn := goja.AssertFunction(c); isFn {
			res, err := fn(goja.Undefined(), val)
			if err != nil {
				panic(err)
			}
			ok = res.ToBoolean()
		} else {
			ok = c.ToBoolean()
		}
		all = all && ok
		tags := v.sampleTags(extra)
		tags["check"] = name
		v.run.recordCheck(v.group, name, ok)
		v.run.reg.add("checks", boolFloat(ok), tags)
	}
	return rt.ToValue(all)
}

func (v *vu) groupFn(call goja.FunctionCall) goja.Value {
	rt := v.rt
	name := call.Argument(0).String()
	fn, ok := goja.AssertFunction(call.Argument(1))
	if !ok {
		panic(rt.NewTypeError("group(%q, fn): fn is not a function", name))
	}
	prev := v.group
	v.group = prev + "::" + name
	start := time.Now()
	res, err := fn(goja.Undefined())
	tags := v.sampleTags(nil)
	v.group = prev
	if err != nil {
		panic(err)
	}
	if _, isPromise := res.Export().(*goja.Promise); isPromise {
		panic(rt.NewTypeError("group(%q): async functions are not supported (k6 forbids them too)", name))
	}
	v.run.reg.add("group_duration", ms(time.Since(start)), tags)
	return res
}

func (v *vu) metricsModule() *goja.Object {
	o := v.rt.NewObject()
	for _, m := range []struct {
		name string
		typ  metricType
	}{{"Counter", counterType}, {"Gauge", gaugeType}, {"Rate", rateType}, {"Trend", trendType}} {
		_ = o.Set(m.name, v.metricConstructor(m.name, m.typ))
	}
	return o
}

func (v *vu) metricConstructor(kind string, typ metricType) func(goja.ConstructorCall) *goja.Object {
	rt := v.rt
	return func(call goja.ConstructorCall) *goja.Object {
		if !v.inInit {
			panic(rt.NewTypeError("new %s(): metrics must be created in the init code", kind))
		}
		name := call.Argument(0).String()
		isTime := call.Argument(1).ToBoolean() && (typ == trendType || typ == gaugeType)
		if err := v.run.reg.define(name, typ, isTime); err != nil {
			panic(rt.NewTypeError(err.Error()))
		}
		_ = call.This.Set("name", name)
		_ = call.This.Set("add", func(c goja.FunctionCall) goja.Value {
			if v.inInit {
				panic(rt.NewTypeError("%s %q: add() is not allowed in the init code", kind, name))
			}
			arg := c.Argument(0)
			value := arg.ToFloat()
			if b, isBool := arg.Export().(bool); isBool {
				value = boolFloat(b)
			}
			extra, err := stringMap(c.Argument(1).Export(), kind+" tags")
			if err != nil {
				panic(rt.NewTypeError(err.Error()))
			}
			v.run.reg.add(name, value, v.sampleTags(extra))
			return goja.Undefined()
		})
		return nil
	}
}

func (v *vu) console() *goja.Object {
	o := v.rt.NewObject()
	for _, level := range []string{"log", "info", "warn", "error", "debug"} {
		_ = o.Set(level, func(call goja.FunctionCall) goja.Value {
			parts := make([]string, len(call.Arguments))
			for i, a := range call.Arguments {
				parts[i] = v.format(a)
			}
			v.run.logf("VU %d %s: %s", v.id, level, strings.Join(parts, " "))
			return goja.Undefined()
		})
	}
	return o
}

func (v *vu) format(a goja.Value) string {
	if obj, ok := a.(*goja.Object); ok {
		if _, isFn := goja.AssertFunction(obj); !isFn {
			stringify, _ := goja.AssertFunction(v.rt.Get("JSON").ToObject(v.rt).Get("stringify"))
			if s, err := stringify(goja.Undefined(), a); err == nil {
				return s.String()
			}
		}
	}
	return a.String()
}

// sampleTags are the tags every sample of this VU carries now, plus extra.
func (v *vu) sampleTags(extra map[string]string) map[string]string {
	tags := make(map[string]string, len(v.tags)+len(extra)+2)
	maps.Copy(tags, v.tags)
	tags["group"] = v.group
	if v.scenario != "" {
		tags["scenario"] = v.scenario
	}
	maps.Copy(tags, extra)
	return tags
}

// unsupported records that the script reached for an API outside the
// subset (Result.Unsupported) and returns the TypeError to throw: the
// script may catch it, but the run still reports it.
func (v *vu) unsupported(format string, args ...any) *goja.Object {
	msg := fmt.Sprintf(format, args...)
	r := v.run
	r.mu.Lock()
	if !slices.Contains(r.res.Unsupported, msg) && len(r.res.Unsupported) < 20 {
		r.res.Unsupported = append(r.res.Unsupported, msg)
	}
	r.mu.Unlock()
	return v.rt.NewTypeError("%s", msg)
}

// describe turns a goja error into "message at file:line".
func describe(err error) string {
	var ex *goja.Exception
	if errors.As(err, &ex) {
		return ex.String()
	}
	return err.Error()
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
