{{/*
egressflow.namespace: where the workloads go, namespace.name or the
release's namespace. Every namespaced object and every RBAC subject uses it;
no name depends on it.
*/}}
{{- define "egressflow.namespace" -}}
{{- default .Release.Namespace .Values.namespace.name -}}
{{- end -}}

{{/* egressflow.image: repository:tag of both workloads. */}}
{{- define "egressflow.image" -}}
{{- printf "%s:%s" .Values.image.repository (toString .Values.image.tag) -}}
{{- end -}}

{{/*
egressflow.clusterChecksum: a checksum of the cluster's values on both pod
templates, so that a change of them rolls both workloads (what kustomize's
hashed ConfigMap name does for deploy/).
*/}}
{{- define "egressflow.clusterChecksum" -}}
{{- include (print .Template.BasePath "/cluster-config.yaml") . | sha256sum -}}
{{- end -}}
