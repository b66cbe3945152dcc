// SPDX-License-Identifier: Apache-2.0
// The member names the event mapping knows, and how each is written on the wire.
//
// Contract (docs in README.md, "How events are stored"):
// - KNOWN lists every member name reachable from @google/adk 2.0.0's `Event` type
//   (ADK's own types and the @google/genai types it embeds), plus `stateRemove` (the
//   protocol's deletes) and the members of ADK's OpenIdConnectWithConfig. A test walks
//   the installed type declarations and fails when a reachable name is missing here.
// - A known name is written in snake_case (`toWireName`): each capital letter becomes
//   `_` plus its lower case. This is a bijection on KNOWN (no known name holds `_`),
//   so `fromWireName` inverts it exactly.
// - OPAQUE members hold free-form data (state keys, tool arguments, metadata): their
//   values are stored exactly as given, keys untouched. MAP_OF_RECORDS members are maps
//   whose keys are data (function call ids) and whose values are ADK records.
export const KNOWN = new Set([
  'accessToken', 'actions', 'additionalHeaders', 'agentState', 'apiKey', 'args', 'artifactDelta',
  'audience', 'audioTranscription', 'authCode', 'authProviderX509CertUrl', 'authResponseUri',
  'authScheme', 'authType', 'authUri', 'author', 'authorAttribution', 'authorizationEndpoint',
  'boolValue', 'branch', 'cacheTokensDetails', 'cachedContentTokenCount', 'candidatesTokenCount',
  'candidatesTokensDetails', 'chunkId', 'citationMetadata', 'citations', 'clientEmail',
  'clientId', 'clientSecret', 'clientX509CertUrl', 'code', 'codeExecutionResult', 'codeVerifier',
  'confidenceScores', 'confirmed', 'content', 'credentialKey', 'credentials', 'customMetadata',
  'data', 'day', 'displayName', 'documentName', 'domain', 'endIndex', 'endOfAgent', 'endOffset',
  'errorCode', 'errorMessage', 'escalate', 'exchangedAuthCredential', 'executableCode',
  'expiresAt', 'expiresIn', 'fileData', 'fileId', 'fileSearchStore', 'fileUri', 'finishReason',
  'finished', 'firstPage', 'flagContentUri', 'fps', 'functionCall', 'functionResponse', 'goAway',
  'googleMapsUri', 'googleMapsWidgetContextToken', 'googleSearchDynamicRetrievalScore',
  'grantTypesSupported', 'groundingChunkIndices', 'groundingChunks', 'groundingMetadata',
  'groundingSupports', 'hint', 'http', 'id', 'idToken', 'image', 'imageSearchQueries',
  'imageUri', 'initialPromptTokenCount', 'inlineData', 'inputTranscription', 'interactionId',
  'interrupted', 'invocationId', 'isolationScope', 'jsonPath', 'language', 'languageCode',
  'lastConsumedClientMessageIndex', 'lastPage', 'level', 'license', 'liveSessionId',
  'liveSessionResumptionUpdate', 'longRunningToolIds', 'maps', 'mediaId', 'mediaProcessing',
  'mediaResolution', 'messageAsOutput', 'mimeType', 'modality', 'modelVersion', 'month', 'name',
  'newHandle', 'nodeInfo', 'nonce', 'nullValue', 'numTokens', 'numberValue', 'oauth2', 'outcome',
  'output', 'outputFor', 'outputTranscription', 'pageNumber', 'pageSpan', 'partIndex',
  'partMetadata', 'partial', 'partialArgs', 'parts', 'password', 'path', 'payload', 'photoUri',
  'placeAnswerSources', 'placeId', 'privateKey', 'privateKeyId', 'projectId', 'promptTokenCount',
  'promptTokensDetails', 'publicationDate', 'ragChunk', 'rawAuthCredential', 'redirectUri',
  'refreshToken', 'relativePublishTimeDescription', 'renderedContent', 'renderedParts',
  'requestedAuthConfigs', 'requestedToolConfirmations', 'resourceRef', 'response', 'resumable',
  'retrievalMetadata', 'retrievalQueries', 'retrievedContext', 'review', 'reviewId',
  'reviewSnippet', 'reviewSnippets', 'revocationEndpoint', 'role', 'route', 'scheduling',
  'scheme', 'scopes', 'sdkBlob', 'searchEntryPoint', 'segment', 'serviceAccount',
  'serviceAccountCredential', 'skipSummarization', 'sourceFlaggingUris', 'sourceId', 'sourceUri',
  'speaker', 'speakerLabel', 'speechMetadata', 'startIndex', 'startOffset', 'state',
  'stateDelta', 'stateRemove', 'stringValue', 'style', 'text', 'thought', 'thoughtSignature',
  'thoughtsTokenCount', 'timeLeft', 'timestamp', 'title', 'token', 'tokenCount', 'tokenEndpoint',
  'tokenEndpointAuthMethod', 'tokenEndpointAuthMethodsSupported', 'tokenUri', 'toolCall',
  'toolResponse', 'toolType', 'toolUsePromptTokenCount', 'toolUsePromptTokensDetails',
  'totalTokenCount', 'trafficType', 'transferToAgent', 'turnComplete', 'type', 'universeDomain',
  'uri', 'usageMetadata', 'useDefaultCredential', 'useIdToken', 'userinfoEndpoint', 'username',
  'videoMetadata', 'web', 'webSearchQueries', 'willContinue', 'word', 'words', 'year',
]);

export const OPAQUE = new Set([
  'stateDelta', 'artifactDelta', 'stateRemove', 'customMetadata', 'args', 'response',
  'partMetadata', 'output', 'route', 'agentState', 'payload', 'additionalHeaders', 'scopes',
]);

export const MAP_OF_RECORDS = new Set(['requestedAuthConfigs', 'requestedToolConfirmations']);

/** camelCase -> snake_case: `functionCall` -> `function_call`, `x509Cert` -> `x509_cert`. */
export function camelToSnake(name) {
  return name.replace(/[A-Z]/g, (c) => '_' + c.toLowerCase());
}

/** Known camelCase name -> its wire name, for names that differ. */
export const TO_WIRE = new Map();
/** Wire name -> known camelCase name, for names that differ. */
export const FROM_WIRE = new Map();
for (const name of KNOWN) {
  const wire = camelToSnake(name);
  if (wire !== name) {
    TO_WIRE.set(name, wire);
    FROM_WIRE.set(wire, name);
  }
}
