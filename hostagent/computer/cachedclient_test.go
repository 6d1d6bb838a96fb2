package computer

import (
	"context"
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// fakeCachedClient is a fake at the benchmark's edge: it answers reads the way
// the manager's informer cache answers the reconciler in the product, with a
// deep copy of an object held in memory, where controller-runtime's fake
// client encodes and decodes every object it is asked for (about half of a
// steady reconcile's time in the profile, a cost the product never pays).
// Writes go to the fake client, and the object written is read again from it
// at the next Get, as an informer would deliver the write.
type fakeCachedClient struct {
	client.Client
	held map[heldKey]client.Object
}

type heldKey struct {
	gvk schema.GroupVersionKind
	key client.ObjectKey
}

func newFakeCachedClient(c client.Client) *fakeCachedClient {
	return &fakeCachedClient{Client: c, held: map[heldKey]client.Object{}}
}

func (c *fakeCachedClient) keyOf(obj client.Object, key client.ObjectKey) (heldKey, error) {
	gvk, err := apiutil.GVKForObject(obj, c.Scheme())
	if err != nil {
		return heldKey{}, err
	}
	return heldKey{gvk: gvk, key: key}, nil
}

func (c *fakeCachedClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	k, err := c.keyOf(obj, key)
	if err != nil {
		return err
	}
	held, ok := c.held[k]
	if !ok {
		if err := c.Client.Get(ctx, key, obj, opts...); err != nil {
			return err
		}
		c.held[k] = obj.DeepCopyObject().(client.Object)
		return nil
	}
	out, in := reflect.ValueOf(obj), reflect.ValueOf(held.DeepCopyObject())
	if out.Type() != in.Type() {
		return fmt.Errorf("fakeCachedClient: %s is held as %s, asked as %s", key, in.Type(), out.Type())
	}
	out.Elem().Set(in.Elem())
	return nil
}

// forget drops what is held of obj, so the next Get reads the write.
func (c *fakeCachedClient) forget(obj client.Object) {
	if k, err := c.keyOf(obj, client.ObjectKeyFromObject(obj)); err == nil {
		delete(c.held, k)
	}
}

func (c *fakeCachedClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	defer c.forget(obj)
	return c.Client.Create(ctx, obj, opts...)
}

func (c *fakeCachedClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	defer c.forget(obj)
	return c.Client.Update(ctx, obj, opts...)
}

func (c *fakeCachedClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	defer c.forget(obj)
	return c.Client.Patch(ctx, obj, patch, opts...)
}

func (c *fakeCachedClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	defer c.forget(obj)
	return c.Client.Delete(ctx, obj, opts...)
}

func (c *fakeCachedClient) Status() client.SubResourceWriter {
	return fakeCachedStatus{SubResourceWriter: c.Client.Status(), c: c}
}

type fakeCachedStatus struct {
	client.SubResourceWriter
	c *fakeCachedClient
}

func (s fakeCachedStatus) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	defer s.c.forget(obj)
	return s.SubResourceWriter.Update(ctx, obj, opts...)
}

func (s fakeCachedStatus) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	defer s.c.forget(obj)
	return s.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}
