package kubetest

import (
	"context"
	"fmt"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
)

// rbacPropagationTimeout bounds the wait for a new binding to reach the API
// server's authorizer. The RBAC authorizer reads Roles and bindings through
// informers, so a binding that has just been written may still be unknown to
// it for some milliseconds; a generous bound costs nothing when it is quick.
const rbacPropagationTimeout = 30 * time.Second

// waitBindingsEffective returns once every RoleBinding and ClusterRoleBinding
// among objs authorizes its subjects: for each subject, a SubjectAccessReview
// of the first request the bound role allows must be allowed. Without this a
// test's first request as a freshly bound identity can be forbidden.
func waitBindingsEffective(ctx context.Context, client kubernetes.Interface, objs []*unstructured.Unstructured) error {
	ctx, cancel := context.WithTimeout(ctx, rbacPropagationTimeout)
	defer cancel()
	for _, obj := range objs {
		var (
			namespace string
			roleRef   rbacv1.RoleRef
			subjects  []rbacv1.Subject
		)
		switch obj.GetKind() {
		case "RoleBinding":
			var b rbacv1.RoleBinding
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &b); err != nil {
				return err
			}
			namespace, roleRef, subjects = b.Namespace, b.RoleRef, b.Subjects
		case "ClusterRoleBinding":
			var b rbacv1.ClusterRoleBinding
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &b); err != nil {
				return err
			}
			roleRef, subjects = b.RoleRef, b.Subjects
		default:
			continue
		}
		rules, err := boundRules(ctx, client, namespace, roleRef)
		if err != nil {
			return fmt.Errorf("%s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
		probe, ok := firstRequest(rules, namespace)
		if !ok {
			continue // a role that allows nothing is effective at once
		}
		for _, s := range subjects {
			review := &authorizationv1.SubjectAccessReview{Spec: probe}
			switch s.Kind {
			case rbacv1.ServiceAccountKind:
				review.Spec.User = "system:serviceaccount:" + s.Namespace + ":" + s.Name
			case rbacv1.UserKind:
				review.Spec.User = s.Name
			case rbacv1.GroupKind:
				review.Spec.User, review.Spec.Groups = "kubetest:rbac-probe", []string{s.Name}
			}
			err := poll(ctx, func() error {
				r, err := client.AuthorizationV1().SubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
				if err != nil {
					return err
				}
				if !r.Status.Allowed {
					return fmt.Errorf("%s may not yet %+v%+v: %s", s.Name, probe.ResourceAttributes, probe.NonResourceAttributes, r.Status.Reason)
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("%s %s not in effect after %v: %w", obj.GetKind(), obj.GetName(), rbacPropagationTimeout, err)
			}
		}
	}
	return nil
}

// boundRules reads the rules of the role a binding refers to.
func boundRules(ctx context.Context, client kubernetes.Interface, namespace string, ref rbacv1.RoleRef) ([]rbacv1.PolicyRule, error) {
	if ref.Kind == "Role" {
		r, err := client.RbacV1().Roles(namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return r.Rules, nil
	}
	r, err := client.RbacV1().ClusterRoles().Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return r.Rules, nil
}

// firstRequest is a request that the first rule allows: a resource
// request in namespace ("" for all namespaces, which only a
// ClusterRoleBinding grants), or a non-resource one (a URL such as
// /metrics).
func firstRequest(rules []rbacv1.PolicyRule, namespace string) (authorizationv1.SubjectAccessReviewSpec, bool) {
	for _, r := range rules {
		if len(r.Verbs) == 0 {
			continue
		}
		if len(r.NonResourceURLs) > 0 {
			return authorizationv1.SubjectAccessReviewSpec{NonResourceAttributes: &authorizationv1.NonResourceAttributes{
				Path: strings.TrimSuffix(r.NonResourceURLs[0], "*"), Verb: r.Verbs[0]}}, true
		}
		if len(r.Resources) == 0 || len(r.APIGroups) == 0 {
			continue
		}
		a := &authorizationv1.ResourceAttributes{Namespace: namespace, Verb: r.Verbs[0], Group: r.APIGroups[0], Resource: r.Resources[0]}
		if len(r.ResourceNames) > 0 {
			a.Name = r.ResourceNames[0]
		}
		return authorizationv1.SubjectAccessReviewSpec{ResourceAttributes: a}, true
	}
	return authorizationv1.SubjectAccessReviewSpec{}, false
}
